# Snapshot only: the old RouterSettings has none of the limit fields; pass those it has,
# so the same attacks reach the old router with its own defaults.
from pathlib import Path

p = Path("tests/security/test_router_limits.py")
s = p.read_text()
old = 'LIMITS = RouterSettings(**{**FAST.__dict__, "max_header_bytes"'
assert old in s
s = s.replace(old, 'LIMITS = RouterSettings(**{k: v for k, v in {**FAST.__dict__, "max_header_bytes"')
s = s.replace('"max_connections": 8})',
              '"max_connections": 8}.items() if k in RouterSettings.__dataclass_fields__})', 1)
p.write_text(s)
