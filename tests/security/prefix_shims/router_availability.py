# Snapshot only: health.classify (and the ejection policy) came with the fix; drop the
# imports the deadline test does not use.
from pathlib import Path

p = Path("tests/router/test_router_availability.py")
s = p.read_text()
s = s.replace("from llmgw.router.health import HealthChecker, classify\n", "")
s = s.replace("from llmgw.router.table import EjectionPolicy, RoutingTable\n", "")
p.write_text(s)
# The old RouterSettings has no request_timeout (the one deadline is the fix): build it from
# the fields it has, so the same hung replicas meet the old router.
anchor = "from tests.support.router import"
head, _, rest = s.partition(anchor)
line, _, tail = rest.partition("\n")
s = (head + anchor + line + "\n\n_RS = RouterSettings\n\n\ndef RouterSettings(**kw):  # noqa: N802\n"
     "    return _RS(**{k: v for k, v in kw.items() if k in _RS.__dataclass_fields__})\n" + tail)
p.write_text(s)
