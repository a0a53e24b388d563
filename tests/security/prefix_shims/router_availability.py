# Snapshot only: health.classify (and the ejection policy) came with the fix; drop the
# imports the deadline test does not use.
from pathlib import Path

p = Path("tests/router/test_router_availability.py")
s = p.read_text()
s = s.replace("from llmgw.router.health import HealthChecker, classify\n", "")
s = s.replace("from llmgw.router.table import EjectionPolicy, RoutingTable\n", "")
p.write_text(s)
