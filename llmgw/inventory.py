"""The Ansible inventory as llmgw sees it: nodes with their llmgw host vars, and routers.

Read through `ansible-inventory --list`, so every inventory Ansible accepts (YAML, INI,
folders with group_vars/host_vars, plugins) means the same thing to llmgw as to Ansible.

Host vars llmgw reads:
    llmgw_node_state    ready | cordoned | draining (default ready)
    llmgw_labels        {key: value}, matched by a profile's node_selector
    llmgw_model_dirs    [paths] where operators keep model files
    llmgw_cache_dir     where llmgw fetches weights (default /var/cache/llmgw)
    llmgw_mgmt_address  how routers reach the engines (default ansible_host, then the name)
    llmgw_failure_domain  a name (room, power feed...) a model's replicas spread across
Nodes are the hosts of group `llmgw_nodes`; without that group, every host that is not
only a router. Routers are the hosts of group `llmgw_routers`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from llmgw.errors import InventoryError

NodeState = Literal["ready", "cordoned", "draining"]
NODE_STATES: tuple[NodeState, ...] = ("ready", "cordoned", "draining")
NODES_GROUP = "llmgw_nodes"
ROUTERS_GROUP = "llmgw_routers"
DEFAULT_CACHE_DIR = "/var/cache/llmgw"


@dataclass(frozen=True)
class Host:
    name: str
    groups: frozenset[str]
    node_state: NodeState = "ready"
    labels: dict[str, str] = field(default_factory=dict)
    model_dirs: list[str] = field(default_factory=list)
    cache_dir: str = DEFAULT_CACHE_DIR
    mgmt_address: str = ""
    vars: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, Host]

    @property
    def nodes(self) -> dict[str, Host]:
        if any(NODES_GROUP in h.groups for h in self.hosts.values()):
            return {n: h for n, h in self.hosts.items() if NODES_GROUP in h.groups}
        return {n: h for n, h in self.hosts.items()
                if not (ROUTERS_GROUP in h.groups and len(h.groups - {"all", "ungrouped"}) == 1)}

    @property
    def routers(self) -> dict[str, Host]:
        return {n: h for n, h in self.hosts.items() if ROUTERS_GROUP in h.groups}


def ansible_bin(name: str) -> str:
    """An Ansible command next to this Python first (the virtualenv), then on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise InventoryError(f"{name} is not installed", hint="install llmgw with its dependencies (ansible-core)")
    return found


def _host(name: str, hv: dict[str, Any], groups: frozenset[str]) -> Host:
    def problem(key: str, want: str) -> InventoryError:
        return InventoryError(f"host {name}: {key} is {hv.get(key)!r}, expected {want}",
                              hint=f"correct {key} for {name} in the inventory", host=name)

    state = hv.get("llmgw_node_state", "ready")
    if state not in NODE_STATES:
        raise problem("llmgw_node_state", "one of ready, cordoned, draining")
    labels = hv.get("llmgw_labels") or {}
    if not isinstance(labels, dict):
        raise problem("llmgw_labels", "a mapping of label: value")
    dirs = hv.get("llmgw_model_dirs") or []
    if isinstance(dirs, str) or not isinstance(dirs, list):
        raise problem("llmgw_model_dirs", "a list of absolute paths")
    for d in dirs:
        if not isinstance(d, str) or not d.startswith("/"):
            raise problem("llmgw_model_dirs", "a list of absolute paths")
    domain = hv.get("llmgw_failure_domain")
    if domain is not None and (isinstance(domain, bool) or not isinstance(domain, str | int)):
        raise problem("llmgw_failure_domain", "a name, e.g. room-a")
    cache = hv.get("llmgw_cache_dir", DEFAULT_CACHE_DIR)
    if not isinstance(cache, str) or not cache.startswith("/"):
        raise problem("llmgw_cache_dir", "an absolute path")
    mgmt = hv.get("llmgw_mgmt_address") or hv.get("ansible_host") or name
    return Host(name=name, groups=groups, node_state=cast(NodeState, state),
                labels={str(k): str(v) for k, v in labels.items()}, model_dirs=list(dirs),
                cache_dir=cache, mgmt_address=str(mgmt), vars=hv)


def parse_inventory_json(path: Path, data: dict[str, Any]) -> Inventory:
    """Build an Inventory from `ansible-inventory --list` output."""
    hostvars: dict[str, dict[str, Any]] = data.get("_meta", {}).get("hostvars", {})
    groups: dict[str, set[str]] = {}

    def walk(group: str, seen: frozenset[str]) -> set[str]:
        if group in seen:
            return set()
        info = data.get(group, {})
        members = set(info.get("hosts", []))
        for child in info.get("children", []):
            members |= walk(child, seen | {group})
        return members

    for group in data:
        if group == "_meta":
            continue
        for host in walk(group, frozenset()):
            groups.setdefault(host, set()).add(group)
    names = set(hostvars) | set(groups)
    hosts = {n: _host(n, hostvars.get(n, {}), frozenset(groups.get(n, set()))) for n in sorted(names)}
    return Inventory(path=path, hosts=hosts)


def load_inventory(path: Path) -> Inventory:
    if not path.exists():
        raise InventoryError(f"inventory {path} does not exist",
                             hint="set `inventory:` in llmgw.yaml to your Ansible inventory file or folder")
    proc = subprocess.run([ansible_bin("ansible-inventory"), "-i", str(path), "--list"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()][-5:]
        raise InventoryError(f"Ansible cannot read the inventory {path}", detail=lines,
                             hint="fix the inventory; `ansible-inventory -i PATH --list` shows the same error")
    # Ansible warns (not fails) on a source it could not parse; treat that as an error,
    # since an empty fleet would plan everything away.
    if "Unable to parse" in proc.stderr or "No inventory was parsed" in proc.stderr:
        raise InventoryError(f"Ansible could not parse the inventory {path}",
                             detail=[ln for ln in proc.stderr.splitlines() if ln.strip()][-5:],
                             hint="fix the inventory syntax")
    return parse_inventory_json(path, json.loads(proc.stdout))
