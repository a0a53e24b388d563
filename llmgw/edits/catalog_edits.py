"""`llmgw scale` and `llmgw model add/remove`: edits of the catalog files.

Each edit changes only what it names (proven by `yamltext.prove`) and the whole catalog
must load with it made; anything else is refused with nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmgw.catalog import Catalog, load_catalog
from llmgw.edits.yamltext import FileEdit, at_path, is_content, parse_yaml, prove, remove_item, set_key
from llmgw.errors import CatalogError, LlmgwError, UsageError
from llmgw.site import Site
from llmgw.yamlio import loads_yaml


def _catalog(site: Site) -> Catalog:
    return load_catalog(site.catalog_dir, root=site.root)


def _validate(site: Site, edit: FileEdit) -> None:
    try:
        load_catalog(site.catalog_dir, root=site.root, override={edit.path: edit.after})
    except CatalogError as exc:
        raise CatalogError(exc.problems, hint="the change would leave the catalog invalid; nothing was written") \
            from None


def scale_edit(site: Site, name: str, minimum: int, maximum: int | None) -> FileEdit | None:
    """Set a model's scaling.min (and max): only its scaling block changes."""
    catalog = _catalog(site)
    model = catalog.resolve(name)
    if model is None:
        raise UsageError(f"no model {name} in the catalog",
                         hint=f"models: {', '.join(m.name for m in catalog) or 'none'}")
    where = catalog.where(model.name)
    path = (site.root / where.file).resolve()
    before = path.read_text(encoding="utf-8")
    doc = parse_yaml(before, path)
    at: tuple[str | int, ...] = ("models", where.index)
    entry = at_path(doc, at)
    wanted = {"min": minimum} | ({"max": maximum} if maximum is not None else {})
    current = entry.get("scaling")
    if isinstance(current, dict) and all(current.get(k) == v for k, v in wanted.items()):
        return None
    if "scaling" in entry and current is not None:
        after = before
        for k, v in wanted.items():
            after = set_key(after, path, (*at, "scaling"), k, str(v))
    else:
        flow = "{" + ", ".join(f"{k}: {v}" for k, v in wanted.items()) + "}"
        after = set_key(before, path, at, "scaling", flow)

    def expect(data: Any) -> Any:
        m = at_path(data, at)
        m["scaling"] = {**(m.get("scaling") or {}), **wanted}
        return data

    prove(path, before, after, expect)
    edit = FileEdit(path, before, after)
    _validate(site, edit)
    return edit


def _as_catalog_text(text: str, source: Path) -> tuple[str, list[str]]:
    """A catalog file's text from FILE (a catalog file, or one model mapping), and its model names."""
    doc = loads_yaml(text, source)
    if isinstance(doc, dict) and "models" in doc:
        models = doc.get("models") or []
    elif isinstance(doc, dict) and "name" in doc:
        lines = text.splitlines()
        first = next(i for i, ln in enumerate(lines) if is_content(ln))
        body = ["  - " + lines[first], *[("    " + ln) if ln.strip() else "" for ln in lines[first + 1:]]]
        text = "\n".join([*lines[:first], "models:", *body]) + "\n"
        models = [doc]
    else:
        raise UsageError(f"{source} holds no models: expected `models:` with a list, or one model mapping")
    names = [str(m.get("name")) for m in models if isinstance(m, dict) and m.get("name")]
    if not names:
        raise UsageError(f"{source} holds no named models")
    return text, names


def model_add_edit(site: Site, source: Path) -> FileEdit:
    """A new catalog file `catalog/<first model>.yaml` holding FILE's models."""
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None
    text, names = _as_catalog_text(text, source)
    dest = site.catalog_dir / f"{names[0]}.yaml"
    if dest.exists():
        raise UsageError(f"{dest} already exists",
                         hint="models are added as a new file; edit that file instead; nothing was written")
    edit = FileEdit(dest, None, text)
    _validate(site, edit)
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
