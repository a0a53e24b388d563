"""`llmgw cordon/uncordon/drain`: set a node's `llmgw_node_state` where the host is defined.

A drain also records its deadline (`llmgw_drain_deadline`, llmgw.nodetime) beside the state;
cordon and uncordon remove it there.

The host may be defined in several inventory files and host_vars; the edit goes where Ansible
would read it last, and the whole inventory is loaded again from a scratch copy to check that
Ansible then sees the new state.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from llmgw.edits.yamltext import YAML_SUFFIXES, FileEdit, at_path, prove, remove_key, set_key
from llmgw.errors import InventoryError, UsageError
from llmgw.inventory import Host, NodeState, load_inventory
from llmgw.nodetime import DRAIN_DEADLINE_VAR, format_time
from llmgw.yamlio import YamlSyntaxError, loads_yaml


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
                vars_ = at_path(doc, at)
                entries.append(HostEntry(f, at, isinstance(vars_, dict) and "llmgw_node_state" in vars_))
        elif _ini_defines(text, host):
            ini.append(f)
    return entries, ini


def scratch_host(inventory: Path, edit: FileEdit, node: str) -> Host | None:
    """`node` as Ansible reads the inventory with the edit made, in a scratch copy (the
    inventory's folder, or its file with the host_vars and group_vars beside it)."""
    with tempfile.TemporaryDirectory(prefix="llmgw-inventory-") as tmp:
        scratch = Path(tmp) / "inventory"
        if inventory.is_dir():
            shutil.copytree(inventory, scratch, symlinks=True)
            target, loaded_from = scratch / edit.path.relative_to(inventory), scratch
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
        return load_inventory(loaded_from).hosts.get(node)


def _validated_inventory(inventory: Path, edit: FileEdit, node: str, state: NodeState,
                         deadline: datetime | None) -> None:
    """Load the inventory as Ansible would with the edit made, in a scratch copy."""
    host = scratch_host(inventory, edit, node)
    if host is None or host.node_state != state:
        now = host.node_state if host else "missing"
        raise InventoryError(f"the edit to {edit.path} would not take effect: Ansible would still see "
                             f"{node} as {now}",
                             hint="llmgw_node_state is set with higher precedence elsewhere (group_vars, "
                                  "another host_vars file); change it there; nothing was written", host=node)
    if state == "draining" and host.drain_deadline != deadline:
        seen = format_time(host.drain_deadline) if host.drain_deadline else "none"
        raise InventoryError(f"the edit to {edit.path} would not take effect: Ansible would still see {node}'s "
                             f"{DRAIN_DEADLINE_VAR} as {seen}",
                             hint=f"{DRAIN_DEADLINE_VAR} is set with higher precedence elsewhere (group_vars, "
                                  "another host_vars file); remove it there; nothing was written", host=node)


def node_state_edit(inventory: Path, node: str, state: NodeState,
                    deadline: datetime | None = None) -> FileEdit | None:
    """The edit that gives `node` this state (and, for draining, this deadline; any other state
    drops the deadline where the state is set), or None when it already has them."""
    inv = load_inventory(inventory)
    host = inv.hosts.get(node)
    if host is None:
        known = ", ".join(inv.nodes) or "none"
        raise UsageError(f"no host {node} in the inventory {inventory}", hint=f"nodes: {known}")
    if node not in inv.nodes:
        raise UsageError(f"{node} is a router, not a node; only nodes take replicas")
    if host.node_state == state and (state != "draining" or host.drain_deadline == deadline):
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
    # Quoted: unquoted, YAML would read a timestamp and Ansible hand it on as another text.
    stamp = format_time(deadline) if state == "draining" and deadline is not None else None
    if stamp is not None:
        after = set_key(after, entry.file, entry.at, DRAIN_DEADLINE_VAR, f'"{stamp}"')
    else:
        after = remove_key(after, entry.file, entry.at, DRAIN_DEADLINE_VAR)

    def expect(data: Any) -> Any:
        target = at_path(data, entry.at[:-1]) if entry.at else None
        if entry.at and (target is None or target[entry.at[-1]] is None):
            assert target is not None
            target[entry.at[-1]] = {"llmgw_node_state": state}
        else:
            at_path(data, entry.at)["llmgw_node_state"] = state
        host_vars = at_path(data, entry.at)
        if stamp is not None:
            host_vars[DRAIN_DEADLINE_VAR] = stamp
        else:
            host_vars.pop(DRAIN_DEADLINE_VAR, None)
        return data

    prove(entry.file, before, after, expect)
    edit = FileEdit(entry.file, before, after)
    _validated_inventory(inventory, edit, node, state, deadline if stamp is not None else None)
    return edit
