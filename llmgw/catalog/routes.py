"""Weighted routes in the catalog (schema.Route, docs/routes.md): where each was written, and
the cross-file rules for their targets and fallbacks (load.cross_check runs them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmgw.catalog.schema import Route
from llmgw.errors import Problem


@dataclass(frozen=True)
class LocatedRoute:
    """A weighted route (schema.Route) and where it was written; `lines` as in Located
    ("name", "aliases[0]", "fallbacks[1]", "routes[0].model", "routes")."""

    route: Route
    file: str
    line: int
    index: int
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def line_at(self, key: str) -> int:
        return self.lines.get(key, self.line)


def route_problems(routes: list[LocatedRoute], canonical: dict[str, str], routed: dict[str, str]) -> list[Problem]:
    """A route's targets and fallbacks are models, named by their own names (the state and the
    router know models by name), never routes: a route of routes would hide where traffic goes."""
    problems: list[Problem] = []
    for e in routes:
        named = [(f"routes[{j}].model", t.model) for j, t in enumerate(e.route.routes)]
        named += [(f"fallbacks[{j}]", fb) for j, fb in enumerate(e.route.fallbacks)]
        for key, name in named:
            what = "a target" if key.startswith("routes") else "a fallback"
            if name in routed:
                why = (f"{name!r} is a weighted route; {what} of a route must be a model: name one of "
                       f"{routed[name]!r}'s models")
            elif name not in canonical:
                why = f"{name!r} is not a model in the catalog; add it or remove {what}"
            elif canonical[name] != name and key.startswith("routes"):
                why = f"{name!r} is an alias of {canonical[name]!r}; name the model itself"
            else:
                continue
            problems.append(Problem(e.file, e.line_at(key), f"models[{e.index}].{key}", why))
    return problems
