"""Operator edits of the site's YAML, made so that the diff is the change and nothing else.

`llmgw cordon/uncordon/drain` set a node's `llmgw_node_state` where the host is defined;
`llmgw scale` edits one model's scaling block; `llmgw model add/remove` add or drop
models. Each edit is made on the text itself (the lines ruamel locates), not by dumping
a reloaded document, so comments, order, quoting and indentation stay exactly as the
operator wrote them. Each edit is then proven: the edited text is parsed again and must
equal the old data with only the intended change, and the whole resulting catalog or
inventory must validate. Anything else is refused with nothing written.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from llmgw.catalog import Catalog, load_catalog
from llmgw.errors import CatalogError, InventoryError, LlmgwError, UsageError
from llmgw.inventory import NodeState, load_inventory
from llmgw.site import Site
from llmgw.yamlio import YamlSyntaxError, atomic_write, loads_yaml

YAML_SUFFIXES = (".yml", ".yaml")
BY_HAND = "make the change by hand; nothing was written"
Path_ = Sequence[str | int]


@dataclass(frozen=True)
class FileEdit:
    """One file's text before and after (None: the file does not exist / is removed)."""

    path: Path
    before: str | None
    after: str | None

    def diff(self, root: Path | None = None) -> str:
        name = str(self.path.relative_to(root)) if root and self.path.is_relative_to(root) else str(self.path)
        lines = difflib.unified_diff((self.before or "").splitlines(keepends=True),
                                     (self.after or "").splitlines(keepends=True),
                                     fromfile=f"a/{name}" if self.before is not None else "/dev/null",
                                     tofile=f"b/{name}" if self.after is not None else "/dev/null")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def write(self) -> None:
        if self.after is None:
            self.path.unlink()
        else:
            atomic_write(self.path, self.after)


class UnsafeEdit(LlmgwError):
    """The text could not be changed in place with certainty; the operator edits it by hand."""


# -- plain data, for proving an edit ---------------------------------------------------------

def plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def _at(doc: Any, path: Path_) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _parse(text: str, path: Path) -> Any:
    try:
        return loads_yaml(text, path)
    except YamlSyntaxError as exc:
        raise UnsafeEdit(f"{path}: editing it produced invalid YAML ({exc.problem})",
                         hint=BY_HAND) from None


def _prove(path: Path, before: str, after: str, expect: Callable[[Any], Any]) -> None:
    """The edited text must parse to exactly `expect(old data)`: the change and nothing else."""
    want = expect(plain(_parse(before, path)))
    got = plain(_parse(after, path))
    if got != want:
        raise UnsafeEdit(f"{path}: llmgw could not make this change without touching anything else",
                         hint=BY_HAND)


# -- text surgery -----------------------------------------------------------------------------

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _collection_end(line: str, col: int) -> int:
    """Where the flow collection opening at `col` closes (exclusive), on the same line."""
    depth, quote = 0, ""
    for i in range(col, len(line)):
        ch = line[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    raise UnsafeEdit("a flow collection spans lines", hint=BY_HAND)


def _scalar_end(line: str, col: int, flow: bool) -> int:
    """Where the scalar (or same-line flow collection) starting at `col` ends (exclusive)."""
    if col >= len(line):
        return col
    q = line[col]
    if flow and q in "{[":
        return _collection_end(line, col)
    if q in "\"'":
        i = col + 1
        while i < len(line):
            if q == "'" and line[i] == "'" and line[i + 1:i + 2] == "'":
                i += 2
                continue
            if q == '"' and line[i] == "\\":
                i += 2
                continue
            if line[i] == q:
                return i + 1
            i += 1
        raise UnsafeEdit("a quoted value spans lines", hint=BY_HAND)
    stops = [len(line.rstrip("\n"))]
    m = re.search(r"\s#", line[col:])
    if m:
        stops.append(col + m.start())
    if flow:
        for ch in ",}]":
            j = line.find(ch, col)
            if j >= 0:
                stops.append(j)
    end = min(stops)
    while end > col and line[end - 1] in " \t":
        end -= 1
    return end


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The last content line (index) of a block whose entries sit at `indent`, from `start` on."""
    last = start
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not _is_content(line):
            continue
        ind = _indent(line)
        # Deeper lines belong to the last entry; so does a list written at the key's own indent.
        if ind > indent or (ind == indent and line.lstrip().startswith("-")):
            last = i
            continue
        break
    return last


def _ensure_nl(line: str) -> str:
    return line if line.endswith("\n") else line + "\n"


def set_key(text: str, path: Path, mapping_at: Path_, key: str, value: str) -> str:
    """`text` with `key: value` set in the mapping at `mapping_at` (value as YAML source).

    An existing scalar is replaced where it stands; a new key goes after the mapping's last
    entry (block style) or before its closing brace (flow style); a host with no vars
    (`gpu-01:`) gets its first one on a new line.
    """
    doc = _parse(text, path)
    lines = text.splitlines(keepends=True)
    parent_path, last = list(mapping_at[:-1]), mapping_at[-1] if mapping_at else None
    mapping = _at(doc, mapping_at)
    if mapping is None:
        parent = _at(doc, parent_path)
        if not isinstance(parent, CommentedMap) or parent.fa.flow_style():
            raise UnsafeEdit(f"{path}: cannot add {key} here", hint=BY_HAND)
        kl, kc = parent.lc.key(last)
        line = lines[kl]
        colon = line.index(":", kc + len(str(last)))
        rest = line[colon + 1:]
        comment = rest[rest.index("#"):] if "#" in rest else ""
        body = rest[:len(rest) - len(comment)] if comment else rest
        if body.strip() not in ("", "~", "null", "Null", "NULL"):
            raise UnsafeEdit(f"{path}: cannot add {key} to {last}", hint=BY_HAND)
        step = 2
        for sib in parent.values():
            if isinstance(sib, CommentedMap) and not sib.fa.flow_style() and len(sib):
                step = sib.lc.key(next(iter(sib)))[1] - kc
                break
        head = line[:colon + 1] + (" " + comment.rstrip("\n") if comment else "")
        lines[kl] = head.rstrip() + "\n"
        lines.insert(kl + 1, f"{' ' * (kc + step)}{key}: {value}\n")
        return "".join(lines)
    if not isinstance(mapping, CommentedMap):
        raise UnsafeEdit(f"{path}: expected a mapping at {'.'.join(map(str, mapping_at))}",
                         hint=BY_HAND)
    flow = bool(mapping.fa.flow_style())
    if key in mapping:
        if mapping[key] is None or isinstance(mapping[key], dict | list):
            raise UnsafeEdit(f"{path}: {key} is not a single value", hint=BY_HAND)
        vl, vc = mapping.lc.value(key)
        line = lines[vl]
        end = _scalar_end(line, vc, flow)
        lines[vl] = line[:vc] + value + line[end:]
        return "".join(lines)
    if len(mapping) == 0:
        parent = _at(doc, parent_path)
        vl, vc = parent.lc.value(last)
        line = lines[vl]
        m = re.match(r"\{\s*\}", line[vc:])
        if not m:
            raise UnsafeEdit(f"{path}: cannot add {key} here", hint=BY_HAND)
        lines[vl] = line[:vc] + f"{{{key}: {value}}}" + line[vc + m.end():]
        return "".join(lines)
    last_key = list(mapping)[-1]
    if flow:
        vl, vc = mapping.lc.value(last_key)
        line = lines[vl]
        end = _scalar_end(line, vc, True)
        lines[vl] = line[:end] + f", {key}: {value}" + line[end:]
        return "".join(lines)
    kl, kc = mapping.lc.key(last_key)
    end = _block_end(lines, kl, kc)
    lines[end] = _ensure_nl(lines[end])
    lines.insert(end + 1, f"{' ' * kc}{key}: {value}\n")
    return "".join(lines)


def remove_item(text: str, path: Path, seq_at: Path_, index: int) -> str:
    """`text` without item `index` of the block sequence at `seq_at`, with its comments inside it."""
    doc = _parse(text, path)
    seq = _at(doc, seq_at)
    if not isinstance(seq, CommentedSeq) or seq.fa.flow_style():
        raise UnsafeEdit(f"{path}: expected a block list at {'.'.join(map(str, seq_at))}",
                         hint=BY_HAND)
    lines = text.splitlines(keepends=True)
    il, ic = seq.lc.item(index)
    dash = ic - 2 if lines[il][ic - 2:ic].startswith("-") else _indent(lines[il])
    if not lines[il].lstrip().startswith("-"):
        raise UnsafeEdit(f"{path}: cannot find the list item", hint=BY_HAND)
    # Comment lines right above the item (no blank line between) introduce it: they go with it.
    start = il
    while start > 0 and lines[start - 1].strip().startswith("#") and _indent(lines[start - 1]) >= dash:
        start -= 1
    end = il + 1
    while end < len(lines):
        line = lines[end]
        if (_is_content(line) or line.strip().startswith("#")) and _indent(line) <= dash:
            break
        end += 1
    # Keep the blank lines and comments that introduce what follows; drop only the item's own.
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    while end < len(lines) and not lines[end].strip():
        end += 1
    through_end = end >= len(lines)
    del lines[start:end]
    if through_end:  # the last item went: leave no blank lines trailing
        while lines and not lines[-1].strip():
            lines.pop()
    return "".join(lines)


# -- inventory: node state ---------------------------------------------------------------------

@dataclass(frozen=True)
class HostEntry:
    file: Path
    at: tuple[str | int, ...]  # path to the host's vars mapping ((): the file is host_vars)
    sets_state: bool


def _inventory_files(inventory: Path) -> list[Path]:
    if inventory.is_file():
        return [inventory]
    out = []
    for p in sorted(inventory.rglob("*")):
        rel = p.relative_to(inventory).parts
        if p.is_file() and rel[0] not in ("group_vars", "host_vars") and not p.name.startswith("."):
            out.append(p)
    return out


def _host_vars_files(inventory: Path, host: str) -> list[Path]:
    base = (inventory if inventory.is_dir() else inventory.parent) / "host_vars"
    found = [base / f"{host}{s}" for s in ("", *YAML_SUFFIXES) if (base / f"{host}{s}").is_file()]
    folder = base / host
    if folder.is_dir():
        found += sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in YAML_SUFFIXES)
    return found


def _yaml_hosts(doc: Any, host: str) -> list[tuple[str | int, ...]]:
    found: list[tuple[str | int, ...]] = []

    def walk(group: Any, at: tuple[str | int, ...], depth: int) -> None:
        if not isinstance(group, dict) or depth > 64:
            return
        hosts = group.get("hosts")
        if isinstance(hosts, dict) and host in hosts:
            found.append((*at, "hosts", host))
        children = group.get("children")
        if isinstance(children, dict):
            for name in children:
                walk(children[name], (*at, "children", name), depth + 1)

    if isinstance(doc, dict):
        for name in doc:
            walk(doc[name], (name,), 0)
    return found


def _ini_defines(text: str, host: str) -> bool:
    return any(line.split()[0] == host for line in text.splitlines()
               if line.strip() and not line.lstrip().startswith(("#", ";", "[")))


def host_entries(inventory: Path, host: str) -> tuple[list[HostEntry], list[Path]]:
    """Where `host` is defined in YAML (and host_vars), and the INI files naming it."""
    entries: list[HostEntry] = []
    ini: list[Path] = []
    for f in _host_vars_files(inventory, host):
        hv = loads_yaml(f.read_text(encoding="utf-8"), f)
        if isinstance(hv, dict):
            entries.append(HostEntry(f, (), "llmgw_node_state" in hv))
    for f in _inventory_files(inventory):
        text = f.read_text(encoding="utf-8", errors="replace")
        doc: Any = None
        try:
            doc = loads_yaml(text, f)
        except YamlSyntaxError:
            doc = None
        if isinstance(doc, dict):
            for at in _yaml_hosts(doc, host):
                vars_ = _at(doc, at)
                entries.append(HostEntry(f, at, isinstance(vars_, dict) and "llmgw_node_state" in vars_))
        elif _ini_defines(text, host):
            ini.append(f)
    return entries, ini


def _validated_inventory(inventory: Path, edit: FileEdit, node: str, state: NodeState) -> None:
    """Load the inventory as Ansible would with the edit made, in a scratch copy."""
    with tempfile.TemporaryDirectory(prefix="llmgw-inventory-") as tmp:
        scratch = Path(tmp) / "inventory"
        if inventory.is_dir():
            shutil.copytree(inventory, scratch, symlinks=True)
            target = scratch / edit.path.relative_to(inventory)
            loaded_from = scratch
        else:
            scratch.mkdir()
            for sub in ("host_vars", "group_vars"):
                if (inventory.parent / sub).is_dir():
                    shutil.copytree(inventory.parent / sub, scratch / sub, symlinks=True)
            loaded_from = scratch / inventory.name
            shutil.copy2(inventory, loaded_from)
            target = scratch / edit.path.relative_to(inventory.parent)
        assert edit.after is not None
        target.write_text(edit.after, encoding="utf-8")
        host = load_inventory(loaded_from).hosts.get(node)
    if host is None or host.node_state != state:
        now = host.node_state if host else "missing"
        raise InventoryError(f"the edit to {edit.path} would not take effect: Ansible would still see "
                             f"{node} as {now}",
                             hint="llmgw_node_state is set with higher precedence elsewhere (group_vars, "
                                  "another host_vars file); change it there; nothing was written", host=node)


def node_state_edit(inventory: Path, node: str, state: NodeState) -> FileEdit | None:
    """The edit that gives `node` this state, or None when it already has it."""
    inv = load_inventory(inventory)
    host = inv.hosts.get(node)
    if host is None:
        known = ", ".join(inv.nodes) or "none"
        raise UsageError(f"no host {node} in the inventory {inventory}", hint=f"nodes: {known}")
    if node not in inv.nodes:
        raise UsageError(f"{node} is a router, not a node; only nodes take replicas")
    if host.node_state == state:
        return None
    entries, ini = host_entries(inventory, node)
    if not entries:
        where = ", ".join(str(p) for p in ini) or str(inventory)
        raise InventoryError(
            f"{node} is defined in {where}, which is not YAML; llmgw edits only YAML inventories",
            hint=f"set `llmgw_node_state: {state}` for {node} by hand, or move the host to a YAML "
                 f"inventory or host_vars/{node}.yml; nothing was written", host=node)
    # host_vars files (at == ()) outrank the inventory's own host vars; among inventory
    # entries the last one read wins, as in Ansible.
    setting = [e for e in entries if e.sets_state]
    entry = next((e for e in setting if e.at == ()), setting[-1] if setting else entries[0])
    before = entry.file.read_text(encoding="utf-8")
    after = set_key(before, entry.file, entry.at, "llmgw_node_state", state)

    def expect(data: Any) -> Any:
        target = _at(data, entry.at[:-1]) if entry.at else None
        if entry.at and (target is None or target[entry.at[-1]] is None):
            assert target is not None
            target[entry.at[-1]] = {"llmgw_node_state": state}
        else:
            _at(data, entry.at)["llmgw_node_state"] = state
        return data

    _prove(entry.file, before, after, expect)
    edit = FileEdit(entry.file, before, after)
    _validated_inventory(inventory, edit, node, state)
    return edit


# -- catalog: scale, add, remove ----------------------------------------------------------------

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
    doc = _parse(before, path)
    at: tuple[str | int, ...] = ("models", where.index)
    entry = _at(doc, at)
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
        m = _at(data, at)
        m["scaling"] = {**(m.get("scaling") or {}), **wanted}
        return data

    _prove(path, before, after, expect)
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
        first = next(i for i, ln in enumerate(lines) if _is_content(ln))
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
    doc = _parse(before, path)
    if isinstance(doc, dict) and list(doc) == ["models"] and len(doc["models"]) == 1:
        edit = FileEdit(path, before, None)
    else:
        after = remove_item(before, path, ("models",), where.index)

        def expect(data: Any) -> Any:
            del data["models"][where.index]
            return data

        _prove(path, before, after, expect)
        edit = FileEdit(path, before, after)
    _validate(site, edit)
    return edit
