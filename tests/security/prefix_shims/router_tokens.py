# Snapshot only: before the fix there was one token for every router, router_token_for(state_file);
# hand each "router" that shared token, as apply did.
from pathlib import Path

p = Path("tests/security/test_load_reports_per_router.py")
s = p.read_text()
old = "        return router_token_for(self.state_file, router)\n"
assert old in s
p.write_text(s.replace(old, "        return router_token_for(self.state_file)\n"))
