"""Load every catalog file under a folder and validate the whole catalog at once.

All problems are collected before anything is reported, each located at a file and
line, so an operator fixes a catalog in one pass rather than one error per run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmgw import collector
from llmgw.catalog.routes import LocatedRoute, route_problems
from llmgw.catalog.schema import Adapter, Model, Route
from llmgw.errors import CatalogError, Problem
from llmgw.yamlio import MAX_FILE_BYTES, FileError, YamlSyntaxError, decode_text, line_of, loads_yaml

_LEADING_FIELD = re.compile(r"^([a-z_]+): (.*)$", re.S)


@dataclass(frozen=True)
class Located:
    """A model and where it was written, for errors raised after loading."""

    model: Model
    file: str
    line: int
    index: int
    # The line of each key cross-file checks may point at ("name", "aliases[0]",
    # "fallbacks", "fallbacks[1]"); `line` (the model's first) where not known.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def line_at(self, key: str) -> int:
        return self.lines.get(key, self.line)


class Catalog:
    """A validated catalog: models in a stable order, names and aliases resolved.

    Weighted routes are kept apart (`routes`): they run nothing, so everything that
    places, fetches or scales models iterates the models alone."""

    def __init__(self, entries: list[Located], routes: Iterable[LocatedRoute] = ()) -> None:
        self.route_entries = sorted(routes, key=lambda e: e.route.name)
        self.routes: dict[str, Route] = {e.route.name: e.route for e in self.route_entries}
        self.entries = sorted(entries, key=lambda e: e.model.name)
        self.models: dict[str, Model] = {e.model.name: e.model for e in self.entries}
        # The first entry of each name, as a scan of `entries` finds it: `where` is asked
        # once per model (servability, weights), so a scan made validation quadratic.
        self._where: dict[str, Located] = {}
        for e in self.entries:
            self._where.setdefault(e.model.name, e)
        self._names: dict[str, str] = {}
        for m in self.models.values():
            self._names[m.name] = m.name
            for a in m.aliases:
                self._names[a] = m.name

    def __iter__(self) -> Iterator[Model]:
        return iter(self.models.values())

    def __len__(self) -> int:
        return len(self.models)

    def resolve(self, name: str) -> Model | None:
        """A model by its name or one of its aliases."""
        canonical = self._names.get(name)
        return self.models[canonical] if canonical else None

    def where(self, name: str) -> Located:
        """Where the model of that name was written; KeyError for a name not here."""
        return self._where[name]

    def resolve_adapter(self, name: str) -> tuple[Model, Adapter] | None:
        """A LoRA adapter by its name or one of its aliases, with its base model."""
        for m in self.models.values():
            for a in m.adapters:
                if name == a.name or name in a.aliases:
                    return m, a
        return None

    def resolve_route(self, name: str) -> Route | None:
        """A weighted route by its name or one of its aliases."""
        for r in self.routes.values():
            if name == r.name or name in r.aliases:
                return r
        return None

    def where_route(self, name: str) -> LocatedRoute:
        """Where the route of that name was written; KeyError for a name not here."""
        for e in self.route_entries:
            if e.route.name == name:
                return e
        raise KeyError(name)


def catalog_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def _lower_first(msg: str) -> str:
    """`String should match...` -> `string should match...`; a name (`LD_PRELOAD is...`) stays as written."""
    return msg[0].lower() + msg[1:] if msg[1:2].islower() else msg


def _pydantic_problems(exc: ValidationError, doc: Any, rel: str, prefix: list[str | int]) -> Iterable[Problem]:
    for err in exc.errors():
        loc: list[str | int] = [*prefix, *err["loc"]]
        msg = err["msg"].removeprefix("Value error, ")
        # A validator names the field it objects to first ("max: 1 is below min 2"):
        # point at that field's line rather than at its parent mapping.
        m = _LEADING_FIELD.match(msg)
        if m and err["type"] == "value_error":
            loc.append(m.group(1))
            msg = m.group(2)
        if loc and loc[-1] == "[key]":  # a mapping key itself is wrong (an env name): name the key
            loc = loc[:-1]
            msg = f"the key {err['input']!r} is not allowed here: {_lower_first(msg)}"
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}; check its spelling (the catalog refuses keys it does not know)"
        elif err["type"] == "missing":
            msg = f"{loc[-1]!r} is required"
        elif err["type"] == "literal_error":
            msg = f"{err['input']!r} is not allowed: {msg[0].lower()}{msg[1:]}"
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        yield Problem(rel, line_of(doc, loc), path, msg)


def parse_file(path: Path, rel: str, text: str | None = None) -> tuple[list[Located], list[Problem]]:
    """One file's models, or its problems; `text` overrides the file's contents (for edits)."""
    located, _routes, problems = parse_entries(path, rel, text)
    return located, problems


def parse_entries(path: Path, rel: str,
                  text: str | None = None) -> tuple[list[Located], list[LocatedRoute], list[Problem]]:
    """One file's models and weighted routes, or its problems; `text` as in parse_file."""
    try:
        raw = decode_text(_read_bytes(path), path) if text is None else text
        # plain: a catalog is data, so YAML tags (`!!python/object`) are refused
        doc = loads_yaml(raw, path, plain=True)
    except YamlSyntaxError as exc:
        return [], [], [Problem(rel, exc.line, "", f"not valid YAML: {exc.problem}")]
    except FileError as exc:
        return [], [], [Problem(rel, exc.line, "", exc.problem)]
    except OSError as exc:
        return [], [], [Problem(rel, 0, "", f"cannot be read: {exc.strerror}")]
    if doc is None:
        return [], [], []
    if not isinstance(doc, dict):
        return [], [], [Problem(rel, line_of(doc, []), "", "expected a mapping with a `models:` list")]
    problems: list[Problem] = []
    located: list[Located] = []
    routes: list[LocatedRoute] = []
    extra = sorted(str(k) for k in doc if k != "models")
    for key in extra:
        problems.append(Problem(rel, line_of(doc, [key]), key,
                                "unknown key; a catalog file holds only `models:`"))
    models = doc.get("models", [])
    if not isinstance(models, list):
        return [], [], [*problems, Problem(rel, line_of(doc, ["models"]), "models", "expected a list of models")]
    # Each model is validated on its own, so one broken model neither hides the problems
    # of the others nor keeps the valid ones out of the cross-file checks.
    for i, item in enumerate(models):
        if isinstance(item, dict) and "routes" in item:  # a weighted route: no source, no profiles
            route = _parse_route(item, doc, rel, i, problems)
            if route is not None:
                routes.append(route)
            continue
        try:
            model = Model.model_validate(item)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(exc, doc, rel, prefix=["models", i]))
            continue
        lines = {"name": line_of(doc, ["models", i, "name"]),
                 "fallbacks": line_of(doc, ["models", i, "fallbacks"])}
        for field_name, values in (("aliases", model.aliases), ("fallbacks", model.fallbacks)):
            for j in range(len(values)):
                lines[f"{field_name}[{j}]"] = line_of(doc, ["models", i, field_name, j])
        for j, adapter in enumerate(model.adapters):
            at: list[str | int] = ["models", i, "adapters", j]
            lines[f"adapters[{j}]"] = line_of(doc, at)
            lines[f"adapters[{j}].name"] = line_of(doc, [*at, "name"])
            lines[f"adapters[{j}].source"] = line_of(doc, [*at, "source"])
            for k in range(len(adapter.aliases)):
                lines[f"adapters[{j}].aliases[{k}]"] = line_of(doc, [*at, "aliases", k])
        located.append(Located(model, rel, line_of(doc, ["models", i]), i, lines))
    return located, routes, problems


def _parse_route(item: dict[str, Any], doc: Any, rel: str, i: int, problems: list[Problem]) -> LocatedRoute | None:
    try:
        route = Route.model_validate(item)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(exc, doc, rel, prefix=["models", i]))
        return None
    at: list[str | int] = ["models", i]
    lines = {key: line_of(doc, [*at, key]) for key in ("name", "fallbacks", "routes")}
    for field_name, values in (("aliases", route.aliases), ("fallbacks", route.fallbacks)):
        for j in range(len(values)):
            lines[f"{field_name}[{j}]"] = line_of(doc, [*at, field_name, j])
    for j in range(len(route.routes)):
        lines[f"routes[{j}].model"] = line_of(doc, [*at, "routes", j, "model"])
    return LocatedRoute(route, rel, line_of(doc, at), i, lines)


def _read_bytes(path: Path) -> bytes:
    """A catalog file's bytes, at most one byte past the size llmgw reads (so a huge file is refused unread)."""
    with path.open("rb") as fh:
        return fh.read(MAX_FILE_BYTES + 1)


def cross_check(entries: list[Located], routes: Iterable[LocatedRoute] = ()) -> list[Problem]:
    """Rules that span files: unique names and aliases, fallbacks that exist and do not loop,
    route targets that are models."""
    problems: list[Problem] = []
    routes = list(routes)
    owner: dict[str, tuple[Located | LocatedRoute, str]] = {}
    every: list[Located | LocatedRoute] = [*entries, *routes]
    for e in every:
        own, aliases = (e.model.name, e.model.aliases) if isinstance(e, Located) else (e.route.name, e.route.aliases)
        named = [("name", own)] + [(f"aliases[{j}]", a) for j, a in enumerate(aliases)]
        if isinstance(e, Located):  # an adapter is served under its own names: one namespace with models
            for j, ad in enumerate(e.model.adapters):
                named += [(f"adapters[{j}].name", ad.name)]
                named += [(f"adapters[{j}].aliases[{k}]", a) for k, a in enumerate(ad.aliases)]
        for key, name in named:
            if name in owner:
                first, first_key = owner[name]
                what = (f"route {first.route.name!r}" if isinstance(first, LocatedRoute)
                        else f"adapter {name!r} of model {first.model.name!r}" if first_key.startswith("adapters")
                        else f"model {first.model.name!r}")
                problems.append(Problem(
                    e.file, e.line_at(key), f"models[{e.index}].{key}",
                    f"{name!r} is already used by {what} at {first.file}:{first.line_at(first_key)}; names and "
                    "aliases must be unique across the catalog"))
            else:
                owner[name] = (e, key)
    canonical = {n: o.model.name for n, (o, k) in owner.items() if isinstance(o, Located)
                 and not k.startswith("adapters")}
    adapters = {n for n, (o, k) in owner.items() if k.startswith("adapters")}
    routed = {n: o.route.name for n, (o, _) in owner.items() if isinstance(o, LocatedRoute)}
    problems.extend(route_problems(routes, canonical, routed))
    for e in entries:
        for j, fb in enumerate(e.model.fallbacks):
            target = canonical.get(fb)
            if fb in adapters:
                problems.append(Problem(
                    e.file, e.line_at(f"fallbacks[{j}]"), f"models[{e.index}].fallbacks[{j}]",
                    f"{fb!r} is a LoRA adapter, not a model; fall back to a model instead"))
            elif fb in routed:
                problems.append(Problem(
                    e.file, e.line_at(f"fallbacks[{j}]"), f"models[{e.index}].fallbacks[{j}]",
                    f"{fb!r} is a weighted route, not a model; fall back to one of its models instead"))
            elif target is None:
                problems.append(Problem(
                    e.file, e.line_at(f"fallbacks[{j}]"), f"models[{e.index}].fallbacks[{j}]",
                    f"{fb!r} is not a model in the catalog; add it or remove the fallback"))
            elif target == e.model.name:
                problems.append(Problem(
                    e.file, e.line_at(f"fallbacks[{j}]"), f"models[{e.index}].fallbacks[{j}]",
                    f"{fb!r} is this model itself; a model cannot fall back to itself"))
    problems.extend(_cycles(entries, canonical))
    return problems


def _cycles(entries: list[Located], canonical: dict[str, str]) -> list[Problem]:
    graph = {e.model.name: [canonical[f] for f in e.model.fallbacks
                            if f in canonical and canonical[f] != e.model.name] for e in entries}
    by_name = {e.model.name: e for e in entries}
    reported: set[frozenset[str]] = set()
    problems: list[Problem] = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in graph.get(node, []):
            if nxt in path:
                cycle = path[path.index(nxt):]
                key = frozenset(cycle)
                if key not in reported:
                    reported.add(key)
                    start = by_name[min(cycle)]
                    i = cycle.index(min(cycle))
                    ring = cycle[i:] + cycle[:i] + [min(cycle)]
                    problems.append(Problem(
                        start.file, start.line_at("fallbacks"), f"models[{start.index}].fallbacks",
                        f"fallbacks form a loop: {' -> '.join(ring)}; break it by removing one"))
            elif len(path) < len(graph):
                visit(nxt, [*path, nxt])

    for name in sorted(graph):
        visit(name, [name])
    return problems


def load_catalog(folder: Path, *, root: Path | None = None,
                 override: dict[Path, str | None] | None = None) -> Catalog:
    """Load and validate the catalog under `folder`; raise CatalogError with every problem.

    `override` maps a file to new text (or None to drop it), so an edit can be
    validated as a whole catalog before anything is written.
    """
    root = root or folder.parent
    if not folder.is_dir():
        raise CatalogError([Problem(str(folder), 0, "", "catalog folder does not exist; "
                                    "create it or set `catalog:` in llmgw.yaml")])
    files = set(catalog_files(folder))
    override = {p.resolve(): t for p, t in (override or {}).items()}
    entries: list[Located] = []
    routes: list[LocatedRoute] = []
    problems: list[Problem] = []
    # A pull request can commit a symbolic link (catalog/x.yaml -> /etc/shadow): read only
    # files that are inside the catalog folder once links are followed.
    inside = folder.resolve()
    for f in sorted(files):
        if not f.resolve().is_relative_to(inside):
            problems.append(Problem(str(f.relative_to(root)) if f.is_relative_to(root) else str(f), 0, "",
                                    "is a link to a file outside the catalog folder; llmgw reads only files "
                                    "inside it"))
    files = {f.resolve() for f in files if f.resolve().is_relative_to(inside)} | set(override)
    # Parsing makes millions of small objects and no cycles: the cyclic collector would walk
    # them again and again (10,000 models: 5.2 -> 2.8 s CPU without it). Reference counting
    # still frees everything; the collector runs again afterwards.
    with collector.paused():
        for path in sorted(files):
            if path in override and override[path] is None:
                continue
            try:
                rel = str(path.relative_to(root.resolve()))
            except ValueError:
                rel = str(path)
            located, found, probs = parse_entries(path, rel, override.get(path))
            entries.extend(located)
            routes.extend(found)
            problems.extend(probs)
        # Inside the pause too: the collector's passes over the parsed models landed here (a tenth).
        problems.extend(cross_check(entries, routes))
        if problems:
            raise CatalogError(problems)
        return Catalog(entries, routes)
