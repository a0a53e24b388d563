# Snapshot only: routes_for's known-hosts argument came with the fix (the old tunnels took
# no known-hosts file and always added StrictHostKeyChecking=no); call it as the old code
# did, so the same unknown and changed keys meet the old tunnel.
from pathlib import Path

p = Path("tests/security/test_ssh_host_keys.py")
s = p.read_text()
old = 'routes_for([routers["node1"]], root / "known_hosts")'
assert old in s
p.write_text(s.replace(old, 'routes_for([routers["node1"]])'))
