"""What keeps llmgw holdable: no import cycles, modules of a readable size, pinned package exports.

The import graph is read from the source (ast), not by importing: every `import` and
`from ... import` of an llmgw module, at module level or inside a function (a late
import does not make a cycle go away); `if TYPE_CHECKING:` imports are checked on their own
(a type-only cycle is a type in the wrong module).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmgw"
MAX_LINES = 350
# A module above MAX_LINES says why near its top, in a line starting with this.
WHY_LONG = re.compile(r"^\s*(#\s*)?Why long: \S")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "ansible_data" not in p.parts}
PACKAGES = sorted(name for name, p in MODULES.items() if p.name == "__init__.py")


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(importer: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    if MODULES[importer].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_of(name: str, types: bool = False) -> set[str]:
    """The llmgw modules `name` imports (the module itself when `from pkg import submodule`);
    with `types`, those under `if TYPE_CHECKING:` too."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not types and isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, node.level, node.module)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in MODULES and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module, as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan, recursive: the graph is a few hundred nodes
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_cycle_through(graph, comp) for comp in components]


def _cycle_through(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest import path from comp[0] back to itself, inside the component."""
    members, start = set(comp), comp[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return comp


def test_the_cycle_finder_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve() -> None:
    assert _resolve("llmgw.planner.schema", 1, "spec") == "llmgw.planner.spec"
    assert _resolve("llmgw.planner", 1, "schema") == "llmgw.planner.schema"
    assert _resolve("llmgw.planner.schema", 2, "errors") == "llmgw.errors"


def test_no_import_cycle_in_llmgw() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    # the graph is read, not empty: a package's front door, a sibling, a late import inside a function
    assert {"llmgw.planner.schema", "llmgw.planner.spec"} <= graph["llmgw.planner.reconcile"]
    assert "llmgw.cli.context" in graph["llmgw.cli"]
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (break each, e.g. by moving what both need into a third module):\n" + \
        "\n".join(" -> ".join(c) for c in cycles)


# Type-only cycles not yet broken, each with what breaking it takes. The list only shrinks:
# the test fails on a new cycle and on an entry that no longer is one.
KNOWN_TYPE_CYCLES: dict[tuple[str, ...], str] = {}


def test_type_only_imports_make_no_new_cycle() -> None:
    graph = {name: imports_of(name, types=True) for name in MODULES}
    assert "llmgw.views.runtime" in graph["llmgw.views"]  # TYPE_CHECKING imports are read
    found = {tuple(sorted(set(c))) for c in import_cycles(graph)}
    assert found == set(KNOWN_TYPE_CYCLES), (
        f"new type-only cycles: {sorted(found - set(KNOWN_TYPE_CYCLES))}; "
        f"broken, so remove from KNOWN_TYPE_CYCLES: {sorted(set(KNOWN_TYPE_CYCLES) - found)}")


def test_no_module_is_long_without_saying_why() -> None:
    long = []
    for path in MODULES.values():
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_LINES and not any(WHY_LONG.match(line) for line in lines[:40]):
            long.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
    assert not long, (f"modules above {MAX_LINES} lines: split them by job, or write `Why long: ...` "
                      "in their first 40 lines:\n" + "\n".join(long))


MAP_LINE = re.compile(r"^\s*([a-z_0-9]+\.py)\s", re.M)


def package_map(name: str) -> set[str] | None:
    """The modules a package's docstring map names (`    table.py   what it does`), or None when
    its docstring draws no map."""
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""
    return set(MAP_LINE.findall(doc)) or None


def test_the_map_reader_reads_a_map() -> None:
    assert {"table.py", "proxy.py", "settings.py"} <= (package_map("llmgw.router") or set())
    assert package_map("llmgw") is None


@pytest.mark.parametrize("name", [p for p in PACKAGES if package_map(p) is not None])
def test_a_package_map_names_each_module_once_and_only_those(name: str) -> None:
    """A map in a package's docstring is where a maintainer starts: one that omits a module
    hides it, one that names a gone module misleads (#34)."""
    folder = MODULES[name].parent
    have = {p.name for p in folder.glob("*.py")} - {"__init__.py"}
    listed = package_map(name) or set()
    assert not have - listed, f"{name}'s map in its __init__ omits {sorted(have - listed)}"
    assert not listed - have, f"{name}'s map names modules that do not exist: {sorted(listed - have)}"


def front_door(name: str) -> set[str]:
    """What a package's __init__ offers: names it defines, and names it takes from its own modules.

    Names it imports from elsewhere (the standard library, other llmgw packages) are its
    plumbing, not its exports.
    """
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(f"{name}."):
            names.update(a.asname or a.name for a in node.names
                         if f"{node.module}.{a.name}" not in MODULES)
    return {n for n in names if not n.startswith("_")}


def test_front_door_reads_definitions_and_own_imports() -> None:
    assert {"Plan", "make_plan", "PLAN_VERSION"} <= front_door("llmgw.planner")
    assert "AppContext" in front_door("llmgw.cli")


@pytest.mark.parametrize("name", PACKAGES)
def test_package_exports_are_pinned(name: str) -> None:
    """Like httpx's test_exported_members: `__all__` lists exactly the package's front door."""
    package = importlib.import_module(name)
    exported = getattr(package, "__all__", None)
    offered = front_door(name)
    if exported is None:
        assert not offered, f"{name} offers {sorted(offered)} but has no __all__"
        return
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(package, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    unlisted = offered - set(exported)
    assert not unlisted, f"{name} offers names not in __all__ (list them, or make them private): {sorted(unlisted)}"


def reachable(roots: list[str], *, skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every llmgw module `roots` import, directly or not (a package's __init__ counts), with one
    import path to it; imports into packages named in `skip` are not followed."""
    graph = {name: imports_of(name) for name in MODULES}
    paths = {r: [r] for r in roots}
    todo = list(roots)
    while todo:
        m = todo.pop()
        parents = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        for n in sorted((graph.get(m, set()) | parents) & set(MODULES)):
            if n not in paths and not n.startswith(skip):
                paths[n] = [*paths[m], n]
                todo.append(n)
    return paths


def test_the_router_depends_on_nothing_of_the_control_side() -> None:
    """The router daemon (#16, #18): it asks the controller to start replicas and reports load to it;
    it never plans, applies, runs Ansible or runs the controller. Its read-only dashboard (llmgw.web,
    llmgw.views) explains placement with the planner's read side, so the planner is checked on the
    router's own modules."""
    router = [m for m in MODULES if m == "llmgw.router" or m.startswith("llmgw.router.")]
    everything = reachable(router)
    control = ("llmgw.apply", "llmgw.controller", "llmgw.runner", "llmgw.edits", "llmgw.facts.gather")
    bad = {m: " -> ".join(p) for m, p in everything.items() if m.startswith(control)}
    assert not bad, f"the router reaches the control side: {bad}"
    own = reachable(router, skip=("llmgw.web", "llmgw.views"))
    planner = {m: " -> ".join(p) for m, p in own.items() if m.startswith("llmgw.planner")}
    assert not planner, f"the router reaches the planner: {planner}"
