# Snapshot only: the old Controller takes no runtime folder (it kept its runtime in the clone);
# start it without one, so the same attacks reach the old controller.
from pathlib import Path

p = Path("tests/security/test_controller_trust.py")
s = p.read_text()
old = "Controller(work, runtime=runtime, policy=policy,"
assert old in s
p.write_text(s.replace(old, "Controller(work, policy=policy,"))
