"""`llmgw cordon/uncordon NODE --gpu N`: one GPU's place in the node's `llmgw_cordoned_gpus`.

A cordoned GPU takes no new shard (the planner leaves it out as it leaves out an unhealthy
one); the node's other GPUs stay placeable. The list is written where the host is defined
(the same entry `llmgw cordon NODE` would edit), as a flow list `[2, 5]`, and the whole
inventory is loaded again from a scratch copy to check that Ansible then sees it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from llmgw.edits.node_state import HostEntry, host_entries, scratch_host
from llmgw.edits.yamltext import FileEdit, UnsafeEdit, at_path, parse_yaml, prove, set_key
from llmgw.errors import InventoryError, UsageError
from llmgw.inventory import load_inventory

KEY = "llmgw_cordoned_gpus"


def _sets_key(entry: HostEntry) -> bool:
    doc = parse_yaml(entry.file.read_text(encoding="utf-8"), entry.file)
    found = at_path(doc, entry.at)
    return isinstance(found, dict) and KEY in found


def _flow_list(value: list[int]) -> str:
    return "[" + ", ".join(str(i) for i in value) + "]"


def _write(text: str, path: Path, at: tuple[str | int, ...], value: list[int]) -> str:
    """`text` with KEY set to `value`: set_key for a new key; an existing one-line flow list
    is replaced where it stands (set_key replaces single values only)."""
    doc = parse_yaml(text, path)
    mapping = at_path(doc, at)
    if not isinstance(mapping, CommentedMap) or KEY not in mapping:
        return set_key(text, path, at, KEY, _flow_list(value))
    current = mapping[KEY]
    lines = text.splitlines(keepends=True)
    vl, vc = mapping.lc.value(KEY)
    line = lines[vl]
    m = re.match(r"\[[0-9,\s]*\]", line[vc:])
    if not isinstance(current, list) or not m:
        raise UnsafeEdit(f"{path}:{vl + 1}: {KEY} is not a one-line list such as [2, 5]",
                         hint=f"write it on one line, {KEY}: {_flow_list(value)}; nothing was written")
    lines[vl] = line[:vc] + _flow_list(value) + line[vc + m.end():]
    return "".join(lines)


def gpu_cordon_edit(inventory: Path, node: str, gpu: int, cordon: bool) -> FileEdit | None:
    """The edit that cordons (or uncordons) GPU `gpu` of `node`, or None when it already is so."""
    inv = load_inventory(inventory)
    host = inv.hosts.get(node)
    if host is None:
        raise UsageError(f"no host {node} in the inventory {inventory}",
                         hint=f"nodes: {', '.join(inv.nodes) or 'none'}")
    if node not in inv.nodes:
        raise UsageError(f"{node} is a router, not a node; only nodes' GPUs take shards")
    now = set(host.cordoned_gpus)
    if (gpu in now) == cordon:
        return None
    want = sorted(now | {gpu}) if cordon else sorted(now - {gpu})
    entries, ini = host_entries(inventory, node)
    if not entries:
        where = ", ".join(str(p) for p in ini) or str(inventory)
        raise InventoryError(f"{node} is defined in {where}, which is not YAML; llmgw edits only YAML inventories",
                             hint=f"set `{KEY}: {_flow_list(want)}` for {node} by hand; nothing was written",
                             host=node)
    # As `llmgw cordon NODE` chooses: the entry that sets the key already, host_vars first; else the first.
    setting = [e for e in entries if _sets_key(e)]
    entry = next((e for e in setting if e.at == ()), setting[-1] if setting else entries[0])
    before = entry.file.read_text(encoding="utf-8")
    after = _write(before, entry.file, entry.at, want)

    def expect(data: Any) -> Any:
        parent = at_path(data, entry.at[:-1]) if entry.at else None
        if entry.at and parent is not None and parent[entry.at[-1]] is None:
            parent[entry.at[-1]] = {KEY: want}
        else:
            at_path(data, entry.at)[KEY] = want
        return data

    prove(entry.file, before, after, expect)
    edit = FileEdit(entry.file, before, after)
    seen = scratch_host(inventory, edit, node)
    if seen is None or sorted(seen.cordoned_gpus) != want:
        raise InventoryError(f"the edit to {edit.path} would not take effect: Ansible would still see {node}'s "
                             f"{KEY} as {sorted(seen.cordoned_gpus) if seen else 'missing'}",
                             hint=f"{KEY} is set with higher precedence elsewhere (group_vars, another host_vars "
                                  "file); change it there; nothing was written", host=node)
    return edit
