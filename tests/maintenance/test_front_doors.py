"""Imports between llmgw packages go through the target package's front door (#34).

A package's `__all__` (pinned by test_codebase.test_package_exports_are_pinned) is what other
packages may use; its modules' insides are its own to change. An import reaches past the door
when a module outside package P imports a module inside P (`from llmgw.facts.cache import
read_facts`, `import llmgw.facts.memo`) instead of P itself (`from llmgw.facts import HostFacts`).

Read from the source like the cycle check, late imports and `if TYPE_CHECKING:` ones included.
Two kinds are counted apart:
- SPELLED_PAST: the name *is* in P's __all__, only spelled through the module: always a
  failure (write `from P import NAME`), the cheapest fix there is;
- past the door: the name is not offered. Their number only goes down (MOST, like the router's
  closure); a few target modules are deliberately kept out of their package's door, each in
  BEHIND_THE_DOOR with the reason, and are not counted.
"""

from __future__ import annotations

import ast
import importlib
from collections import Counter

from tests.maintenance.test_codebase import MODULES, PACKAGES, _resolve

# Modules kept out of their package's front door on purpose: importing the package must not load them.
BEHIND_THE_DOOR = {
    "llmgw.facts.memo": "it unpickles what it stored: only the bastion's CLI and planner load it, never "
                        "the router, which imports llmgw.facts (llmgw.facts.memo_in_use)",
    "llmgw.views.planned": "the bastion's loaders run the planner; llmgw.views is imported by the router, "
                           "which must not reach the planner (test_router_closure)",
    "llmgw.router.workers": "the router's worker supervisor, loaded by `llmgw router serve` only",
    "llmgw.controller.api": "the controller's HTTP API (FastAPI), loaded by `llmgw controller` only",
    "llmgw.state.select": "it loads the site and the catalog loader; kept out of llmgw.state's door so the "
                          "router, which imports llmgw.state, does not load them (test_router_closure)",
}
# Imports spelled through a module although the package offers the name, left as they are (none
# today): each with the reason.
SPELLED_PAST: dict[tuple[str, str, str], str] = {}
# Imports past a front door, outside BEHIND_THE_DOOR. It only goes down: when a change brings it
# below, lower it here. 237 when this test came (#34), 223 once the deliberate ones were listed
# above and the names packages offer were imported through their doors; 220 with the keys verb's
# store targeting moved from llmgw.store (which the router imports) into llmgw.cli; 223 when the
# same round's branches landed: the nodes view's version summary (CLI and dashboard, from
# views.versions) and the batch backlog's record type (store.batches, with its siblings above);
# 220 once the router's dashboard moved to a process of its own and the state's backend
# selection behind its door (llmgw.state.select, listed above).
MOST = 220


def package_of(module: str) -> str | None:
    """The innermost llmgw package holding `module` (not the root `llmgw`, whose modules are its own)."""
    parts = module.split(".")
    for i in range(len(parts) - 1, 1, -1):
        name = ".".join(parts[:i])
        if name in PACKAGES:
            return name
    return None


def exports(package: str) -> set[str]:
    return set(getattr(importlib.import_module(package), "__all__", None) or ())


def crossings() -> list[tuple[str, str, str, bool]]:
    """(importer, target module, name or '<module>', whether the name is in the target package's __all__)
    for every import of a module inside a package from outside it."""
    found = []
    for importer, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pairs: list[tuple[str, str]] = []
            if isinstance(node, ast.ImportFrom):
                target = _resolve(importer, node.level, node.module)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    pairs.append((sub, "<module>") if sub in MODULES else (target, alias.name))
            elif isinstance(node, ast.Import):
                pairs = [(alias.name, "<module>") for alias in node.names]
            for target, name in pairs:
                package = package_of(target) if target in MODULES else None
                if package is None or target == package or importer == package or \
                        importer.startswith(package + "."):
                    continue
                found.append((importer, target, name, name in exports(package)))
    return found


def test_the_reader_finds_both_kinds() -> None:
    found = crossings()
    assert ("llmgw.planner.load", "llmgw.facts.memo", "<module>", False) in found
    assert any(t == "llmgw.state.model" and not offered for _i, t, _n, offered in found)
    assert package_of("llmgw.facts.records") == "llmgw.facts" and package_of("llmgw.site") is None
    assert all(not i.startswith(package_of(t) or "?") for i, t, _n, _o in found)


def test_nothing_offered_at_the_door_is_fetched_from_inside() -> None:
    spelled = sorted(f"{i}: from {t} import {n}  (write: from {package_of(t)} import {n})"
                     for i, t, n, offered in crossings() if offered and (i, t, n) not in SPELLED_PAST)
    assert not spelled, "import these through the package's front door:\n" + "\n".join(spelled)


def test_imports_past_front_doors_only_go_down() -> None:
    past = [(i, t, n) for i, t, n, offered in crossings() if not offered and t not in BEHIND_THE_DOOR]
    by_target = Counter(t for _i, t, _n in past)
    listing = "\n".join(f"{count:3d} {target}: " + ", ".join(sorted({n for _i, t, n in past if t == target}))
                        for target, count in by_target.most_common())
    assert len(past) <= MOST, (f"{len(past)} imports reach past a package's __all__, more than {MOST}: offer the "
                               f"name in the package's __init__ (and __all__), or import less\n{listing}")
    print(f"imports past front doors: {len(past)} (ceiling {MOST}), into {len(by_target)} modules")


def test_what_is_behind_the_door_stays_out_of_it() -> None:
    for module, why in BEHIND_THE_DOOR.items():
        assert module in MODULES, f"{module} is listed in BEHIND_THE_DOOR but does not exist"
        package = package_of(module)
        assert package is not None and why
        init = ast.parse(MODULES[package].read_text(encoding="utf-8"))
        loaded = {_resolve(package, n.level, n.module) for n in ast.walk(init) if isinstance(n, ast.ImportFrom)}
        loaded |= {f"{_resolve(package, n.level, n.module)}.{a.name}" for n in ast.walk(init)
                   if isinstance(n, ast.ImportFrom) for a in n.names}
        assert module not in loaded, f"{package}/__init__.py imports {module}, which must stay behind its door: {why}"
