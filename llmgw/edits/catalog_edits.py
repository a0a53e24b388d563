"""`llmgw scale`, `llmgw shift` and `llmgw model add/remove`: edits of the catalog files.

Each edit changes only what it names (proven by `yamltext.prove`) and the whole catalog
must load with it made; anything else is refused with nothing written. A refusal names
only what the edit itself got wrong: problems that follow from it (another model's
fallback to a model the edit broke) are left out, and a file `model add` would have
written is never named: its problems point at the operator's FILE and line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llmgw.catalog import Catalog, Model, Route, format_duration, load_catalog, parse_duration
from llmgw.catalog.load import cross_check, parse_entries
from llmgw.edits.yamltext import FileEdit, at_path, is_content, parse_yaml, prove, remove_item, set_key
from llmgw.errors import CatalogError, LlmgwError, Problem, UsageError
from llmgw.site import Site
from llmgw.yamlio import loads_yaml

_REFUSED = "the change would leave the catalog invalid; nothing was written"


def _catalog(site: Site) -> Catalog:
    return load_catalog(site.catalog_dir, root=site.root)


def _rel(site: Site, path: Path) -> str:
    """A catalog file's name as `load_catalog` writes it in problems."""
    try:
        return str(path.resolve().relative_to(site.root.resolve()))
    except ValueError:
        return str(path.resolve())


def _validate(site: Site, edit: FileEdit, relocate: Callable[[Problem], Problem] | None = None) -> Catalog:
    """The catalog with `edit` made, or an error naming what the edit got wrong.

    The edited file is checked alone first: when it has problems, those are all that is
    reported (a model it breaks drops out of the cross-file checks, and every fallback to
    it would be reported as missing: consequences, not mistakes). A new file is then
    cross-checked after the existing catalog, so a clash is reported on the new entry.
    `relocate` points the new file's problems at where its text came from.
    """
    rel = _rel(site, edit.path)
    problems: list[Problem] = []
    if edit.after is not None:
        located, routes, problems = parse_entries(edit.path, rel, edit.after)
        if not problems and edit.before is None:
            have = _catalog(site)
            problems = [p for p in cross_check([*have.entries, *located], [*have.route_entries, *routes])
                        if p.file == rel]
    if problems and relocate is not None:
        found = [relocate(p) for p in problems]
        n = len(found)
        raise LlmgwError(f"{found[0].file} has {n} problem{'s' if n != 1 else ''}; nothing was written",
                         detail=[str(p) for p in sorted(found)],
                         hint=f"fix {found[0].file}, then run `llmgw model add -f` again")
    if problems:
        raise CatalogError(problems, hint=_REFUSED)
    try:
        return load_catalog(site.catalog_dir, root=site.root, override={edit.path: edit.after})
    except CatalogError as exc:
        raise CatalogError(exc.problems, hint=_REFUSED) from None


@dataclass(frozen=True)
class Scaled:
    """What `scale` did: the edit (None: the catalog already says so) and the model as it is then."""

    edit: FileEdit | None
    model: Model


def in_force(model: Model) -> str:
    """What the model's scaling is and means: the counts, then who starts and stops what."""
    s = model.scaling
    low = max(s.min, 1)  # what runs without load: min, or the one replica a request starts
    text = (f"min {s.min}, max {s.maximum}, idle timeout {format_duration(s.idle_timeout)}, "
            f"on demand {'yes' if s.min == 0 else 'no'}"
            + (f", target {s.target_in_flight} in flight per replica" if s.target_in_flight else "") + ". ")
    if s.min == 0:
        text += ("No replica runs until a request asks for one; the controller (run with --demand-listen) starts "
                 f"it and stops it after {format_duration(s.idle_timeout)} without a request.")
    else:
        text += (f"The planner keeps {s.min} replica{'s' if s.min != 1 else ''} placed; the idle timeout applies "
                 "to min 0 models only.")
    if s.maximum > low and s.target_in_flight:
        text += (f" Above {low}, the controller (run with --demand-listen) adds replicas up to {s.maximum} while the "
                 f"load exceeds {s.target_in_flight} in flight per replica, and removes them after "
                 f"{format_duration(s.down_cooldown)} of lower load.")
    elif s.maximum > low:
        text += (f" Nothing starts replicas above {low} (no target_in_flight); the planner leaves running ones up "
                 f"to max {s.maximum} alone.")
    return text


def scale_edit(site: Site, name: str, minimum: int | None, maximum: int | None,
               idle_timeout: str | None = None) -> Scaled:
    """Set a model's scaling.min, max and idle_timeout: only its scaling block changes."""
    if minimum is not None and maximum is not None and maximum < minimum:
        raise UsageError(f"--max {maximum} is below --min {minimum}; raise --max or lower --min; "
                         "nothing was written")
    catalog = _catalog(site)
    model = catalog.resolve(name)
    route = catalog.resolve_route(name) if model is None else None
    if route is not None:
        raise UsageError(f"{name} is a weighted route: it runs no replicas of its own",
                         hint=f"scale its models ({', '.join(t.model for t in route.routes)}), or move its traffic "
                              f"with `llmgw shift {route.name} MODEL=PERCENT`; nothing was written")
    if model is None:
        raise UsageError(f"no model {name} in the catalog",
                         hint=f"models: {', '.join(m.name for m in catalog) or 'none'}")
    wanted: dict[str, str] = {}
    if minimum is not None:
        wanted["min"] = str(minimum)
    if maximum is not None:
        wanted["max"] = str(maximum)
    if idle_timeout is not None:
        try:
            wanted["idle_timeout"] = format_duration(parse_duration(idle_timeout))
        except ValueError as exc:
            raise UsageError(f"--idle-timeout: {exc}") from None
    if not wanted:
        raise UsageError("nothing to change: give --min, --max or --idle-timeout")
    s = model.scaling
    now = {"min": str(s.min), "max": str(s.maximum), "idle_timeout": format_duration(s.idle_timeout)}
    if all(now[k] == v for k, v in wanted.items()):
        return Scaled(None, model)
    where = catalog.where(model.name)
    path = (site.root / where.file).resolve()
    before = path.read_text(encoding="utf-8")
    doc = parse_yaml(before, path)
    at: tuple[str | int, ...] = ("models", where.index)
    entry = at_path(doc, at)
    if "scaling" in entry and entry.get("scaling") is not None:
        after = before
        for k, v in wanted.items():
            after = set_key(after, path, (*at, "scaling"), k, v)
    else:
        flow = "{" + ", ".join(f"{k}: {v}" for k, v in wanted.items()) + "}"
        after = set_key(before, path, at, "scaling", flow)

    def expect(data: Any) -> Any:
        m = at_path(data, at)
        m["scaling"] = {**(m.get("scaling") or {}),
                        **{k: (v if k == "idle_timeout" else int(v)) for k, v in wanted.items()}}
        return data

    prove(path, before, after, expect)
    edit = FileEdit(path, before, after)
    return Scaled(edit, _validate(site, edit).models[model.name])


@dataclass(frozen=True)
class Shifted:
    """What `shift` did: the edit (None: the catalog already splits so), the route before and after."""

    edit: FileEdit | None
    before: Route
    after: Route


def split_of(route: Route) -> str:
    """`qwen3-8b 90%, qwen3-8b-2511 10%`: the route's split as the catalog says it."""
    return ", ".join(f"{t.model} {t.weight}%" for t in route.routes)


def _wanted_split(route: Route, wanted: dict[str, int]) -> dict[str, int]:
    """Every target's new weight: the named ones as given; when exactly one target is not named,
    it takes what is left of 100; otherwise the others keep theirs, and the whole must be 100."""
    targets = [t.model for t in route.routes]
    unknown = [m for m in wanted if m not in targets]
    if unknown:
        raise UsageError(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a target of route "
                         f"{route.name} (its targets: {', '.join(targets)}); nothing was written",
                         hint="add a target by editing the route's `routes:` in the catalog")
    new = {t.model: wanted.get(t.model, t.weight) for t in route.routes}
    rest = [m for m in targets if m not in wanted]
    named = sum(wanted.values())
    if len(rest) == 1 and named <= 100:
        new[rest[0]] = 100 - named
    total = sum(new.values())
    if total != 100:
        raise UsageError(f"the split would add up to {total}%, not 100%: "
                         + ", ".join(f"{m}={w}" for m, w in new.items()) + "; nothing was written",
                         hint="name every target's percentage, or leave exactly one out to take the rest")
    return new


def parse_shares(args: tuple[str, ...]) -> dict[str, int]:
    """`MODEL=PERCENT` arguments (`qwen3-8b=50`, `qwen3-8b-2511=50%`) as a mapping."""
    if not args:
        raise UsageError("give at least one MODEL=PERCENT (for example qwen3-8b-2511=50)")
    out: dict[str, int] = {}
    for arg in args:
        model, eq, pct = arg.partition("=")
        pct = pct.strip().removesuffix("%")
        if not eq or not model or not pct.isdigit() or not 0 <= int(pct) <= 100:
            raise UsageError(f"{arg!r} is not MODEL=PERCENT with a whole percentage from 0 to 100 "
                             "(for example qwen3-8b-2511=50); nothing was written")
        if model in out:
            raise UsageError(f"{model} is named twice; give each target once; nothing was written")
        out[model] = int(pct)
    return out


def shift_edit(site: Site, name: str, wanted: dict[str, int]) -> Shifted:
    """Set the weights of route NAME's targets: only their `weight:` values change in the file."""
    catalog = _catalog(site)
    route = catalog.resolve_route(name)
    if route is None:
        model = catalog.resolve(name)
        why = (f"{name} is a model, not a weighted route" if model is not None
               else f"no weighted route {name} in the catalog")
        raise UsageError(why, hint=f"routes: {', '.join(catalog.routes) or 'none (docs/routes.md makes one)'}")
    new = _wanted_split(route, wanted)
    if all(new[t.model] == t.weight for t in route.routes):
        return Shifted(None, route, route)
    where = catalog.where_route(route.name)
    path = (site.root / where.file).resolve()
    before = path.read_text(encoding="utf-8")
    after = before
    at: tuple[str | int, ...] = ("models", where.index)
    for j, t in enumerate(route.routes):
        if new[t.model] != t.weight:
            after = set_key(after, path, (*at, "routes", j), "weight", str(new[t.model]))

    def expect(data: Any) -> Any:
        for item in at_path(data, at)["routes"]:
            item["weight"] = new[item["model"]]
        return data

    prove(path, before, after, expect)
    edit = FileEdit(path, before, after)
    return Shifted(edit, route, _validate(site, edit).routes[route.name])


def _as_catalog_text(text: str, source: Path) -> tuple[str, list[str], Callable[[Problem], Problem]]:
    """A catalog file's text from FILE (a catalog file, or one model mapping), its model names,
    and how a problem in that text maps back to FILE's own lines and keys."""
    doc = loads_yaml(text, source)
    if isinstance(doc, dict) and "models" in doc:
        models = doc.get("models") or []

        def relocate(p: Problem) -> Problem:
            return replace(p, file=str(source))
    elif isinstance(doc, dict) and "name" in doc:
        lines = text.splitlines()
        first = next(i for i, ln in enumerate(lines) if is_content(ln))
        body = ["  - " + lines[first], *[("    " + ln) if ln.strip() else "" for ln in lines[first + 1:]]]
        text = "\n".join([*lines[:first], "models:", *body]) + "\n"
        models = [doc]

        def relocate(p: Problem) -> Problem:
            # `models:` went in as line first+1: every line after it is FILE's line one up.
            line = p.line - 1 if p.line > first + 1 else p.line
            return replace(p, file=str(source), line=line, path=p.path.removeprefix("models[0]").lstrip("."))
    else:
        raise UsageError(f"{source} holds no models: expected `models:` with a list, or one model mapping")
    names = [str(m.get("name")) for m in models if isinstance(m, dict) and m.get("name")]
    if not names:
        raise UsageError(f"{source} holds no named models")
    return text, names, relocate


def model_add_edit(site: Site, source: Path) -> FileEdit:
    """A new catalog file `catalog/<first model>.yaml` holding FILE's models."""
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None
    text, names, relocate = _as_catalog_text(text, source)
    dest = site.catalog_dir / f"{names[0]}.yaml"
    if dest.exists():
        raise UsageError(f"{dest} already exists",
                         hint="models are added as a new file; edit that file instead; nothing was written")
    edit = FileEdit(dest, None, text)
    _validate(site, edit, relocate)
    return edit


def model_remove_edit(site: Site, name: str) -> FileEdit:
    """Drop one model from its catalog file (the file itself when it held only that model)."""
    catalog = _catalog(site)
    model = catalog.models.get(name)
    if model is None:
        owner = catalog.resolve(name)
        if owner is not None:
            raise UsageError(f"{name} is an alias of {owner.name}; name the model itself to remove it")
        raise UsageError(f"no model {name} in the catalog",
                         hint=f"models: {', '.join(m.name for m in catalog) or 'none'}")
    names = {model.name, *model.aliases}
    dependents = [e for e in catalog.entries if e.model.name != name and names & set(e.model.fallbacks)]
    if dependents:
        raise LlmgwError(
            f"cannot remove {name}: {', '.join(e.model.name for e in dependents)} "
            f"{'falls' if len(dependents) == 1 else 'fall'} back to it",
            detail=[f"{e.file}:{e.line}: {e.model.name} has fallbacks {e.model.fallbacks}" for e in dependents],
            hint="remove those fallbacks first; nothing was written")
    where = catalog.where(name)
    path = (site.root / where.file).resolve()
    before = path.read_text(encoding="utf-8")
    doc = parse_yaml(before, path)
    if isinstance(doc, dict) and list(doc) == ["models"] and len(doc["models"]) == 1:
        edit = FileEdit(path, before, None)
    else:
        after = remove_item(before, path, ("models",), where.index)

        def expect(data: Any) -> Any:
            del data["models"][where.index]
            return data

        prove(path, before, after, expect)
        edit = FileEdit(path, before, after)
    _validate(site, edit)
    return edit
