"""Which test modules a `-m` expression cannot select, known without importing them.

Every pytest-xdist worker collects the whole suite, and importing a module costs its
imports and pytest's assertion rewrite (a lab module pulls in the lab, the engine helpers,
Playwright...), though `make unit` deselects every test in it anyway. A module is left
uncollected only when no test in it could match: the markers every one of its tests
carries are known from its source (a module-level `pytestmark = pytest.mark.x` or a list
of such, which pytest applies to each test) or from the paths tests/conftest.py marks
`slow`, and the expression is false for every value of the markers not known. That is
exact whatever the expression says: a test's other markers can only add to those.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _pytest.mark.expression import Expression


class _Unknown(Exception):
    def __init__(self, key: tuple[str, tuple[tuple[str, object], ...]]) -> None:
        super().__init__(key)
        self.key = key


def could_select(markexpr: str, present: frozenset[str]) -> bool:
    """Whether a test carrying every marker in `present` (and any others) can match `markexpr`.

    Tries every value of the markers the expression asks about and `present` does not
    decide (a marker with arguments, `lab(x=1)`, is never decided: it may or may not match).
    """
    expr = Expression.compile(markexpr)

    def search(assumed: dict[tuple[str, tuple[tuple[str, object], ...]], bool]) -> bool:
        def matcher(name: str, /, **kwargs: str | int | bool | None) -> bool:
            if not kwargs and name in present:
                return True
            key = (name, tuple(sorted(kwargs.items())))
            if key in assumed:
                return assumed[key]
            raise _Unknown(key)

        try:
            return expr.evaluate(matcher)
        except _Unknown as unknown:
            return search({**assumed, unknown.key: True}) or search({**assumed, unknown.key: False})

    return search({})


def _mark_name(node: ast.expr) -> str | None:
    """`NAME` for the expression `pytest.mark.NAME`, else None."""
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest"):
        return node.attr
    return None


def module_markers(source: str) -> frozenset[str]:
    """The plain markers a module's `pytestmark` gives every test in it; none when it is
    bound more than once or in another form (the module is then collected as usual)."""
    if "pytestmark" not in source:
        return frozenset()
    tree = ast.parse(source)
    bindings = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "pytestmark"
                and not isinstance(n.ctx, ast.Load)]
    assigned = [s for s in tree.body if isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name) and s.targets[0].id == "pytestmark"]
    if len(bindings) != 1 or len(assigned) != 1:
        return frozenset()
    value = assigned[0].value
    items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    # Items of another form (a call such as xdist_group("x")) only add markers: left undecided.
    return frozenset(name for item in items if (name := _mark_name(item)) is not None)


def unselectable(path: Path, relpath: str, markexpr: str, slow: tuple[str, ...]) -> bool:
    """Whether no test in the module or folder at `path` (`relpath` from the rootdir, as in
    node ids) can match `markexpr`; `slow` holds the node-id prefixes marked slow."""
    present: set[str] = set()
    key = relpath + "/" if path.is_dir() else relpath
    if any(key.startswith(prefix) for prefix in slow if "::" not in prefix):
        present.add("slow")
    if path.is_file() and path.suffix == ".py" and path.name.startswith("test_"):
        present |= module_markers(path.read_text(encoding="utf-8"))
    return bool(present) and not could_select(markexpr, frozenset(present))
