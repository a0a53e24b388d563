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
    llmgw_drain_deadline  when a drain stops waiting for room elsewhere (UTC, set by `llmgw drain`)
    llmgw_cordoned_gpus   [GPU indices] kept out of placement by hand (`llmgw cordon NODE --gpu N`)
    llmgw_gpu_health_unknown  deny | allow: place on GPUs whose health could not be read (default deny)
Nodes are the hosts of group `llmgw_nodes`; without that group, every host that is not
only a router. Routers are the hosts of group `llmgw_routers`.

Reading an inventory must not run code, since `plan` runs on untrusted pull requests:
`ansible-inventory` runs with only the data-file inventory plugins (YAML, INI, TOML, a
host list; no executable scripts or plugin configs) unless the operator's environment
sets ANSIBLE_INVENTORY_ENABLED, from `/` (so an `ansible.cfg` in the site is not read),
with a time and memory limit. Host names must be DNS names or IP addresses.

Starting `ansible-inventory` costs about a second before it reads anything (1.2 s CPU at
1,024 hosts), so the common case is read here instead: YAML inventory files (one, or a
folder of them) with plain data, no group_vars/host_vars beside them, no host patterns
or ports in host names, no `ansible_group_priority`, and no Ansible configuration that
could change how they read (see `_plain_yaml_inventory`). It follows the yaml inventory
plugin and ansible-inventory's merging (group vars by depth then name, `all` first, the
host's own last); tests compare the two on many inventories. Anything else goes to Ansible.

Why long: both readers (Ansible's output and the in-process one) end in the same host
checks (`_host`), and the in-process one must stay beside them to mean the same thing.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, cast

from llmgw.childenv import child_env
from llmgw.errors import InventoryError
from llmgw.facts import Memo, memo_in_use
from llmgw.hostnames import is_host_name
from llmgw.nodetime import DRAIN_DEADLINE_VAR, parse_deadline
from llmgw.yamlio import FileError, check_yaml_file

NodeState = Literal["ready", "cordoned", "draining"]
NODE_STATES: tuple[NodeState, ...] = ("ready", "cordoned", "draining")
NODES_GROUP = "llmgw_nodes"
ROUTERS_GROUP = "llmgw_routers"
DEFAULT_CACHE_DIR = "/var/cache/llmgw"
# Inventory plugins that read data files only (`script` and `auto` would run code).
SAFE_INVENTORY_PLUGINS = "host_list,yaml,ini,toml"
INVENTORY_TIMEOUT_S = 300
INVENTORY_MEMORY_BYTES = 4 * 1024**3
INVENTORY_FILE_BYTES = 64 * 1024 * 1024  # per file; a 4,096-host inventory is a few MB


@dataclass(frozen=True)
class Host:
    name: str
    groups: frozenset[str]
    node_state: NodeState = "ready"
    labels: dict[str, str] = field(default_factory=dict)
    model_dirs: list[str] = field(default_factory=list)
    cache_dir: str = DEFAULT_CACHE_DIR
    mgmt_address: str = ""
    drain_deadline: datetime | None = None  # llmgw_drain_deadline (llmgw.nodetime), UTC
    cordoned_gpus: frozenset[int] = frozenset()
    gpu_health_unknown: Literal["deny", "allow"] = "deny"
    vars: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, Host]

    # Computed once per inventory (hosts never change after loading): the views ask for a
    # node's entry once per replica, and a fresh dict each time made `status` quadratic
    # (21 s at 4,096 hosts and 10,036 replicas). Callers only read the dicts.
    @cached_property
    def nodes(self) -> dict[str, Host]:
        if any(NODES_GROUP in h.groups for h in self.hosts.values()):
            return {n: h for n, h in self.hosts.items() if NODES_GROUP in h.groups}
        return {n: h for n, h in self.hosts.items()
                if not (ROUTERS_GROUP in h.groups and len(h.groups - {"all", "ungrouped"}) == 1)}

    @cached_property
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


def where(path: Path, name: str) -> str:
    """`file:line` of the first line of the inventory that names `name` (the path alone if none does)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    for f in files:
        try:
            with f.open("rb") as fh:
                for n, raw in enumerate(fh, 1):
                    if name.encode("utf-8", "replace") in raw:
                        return f"{f}:{n}"
        except OSError:
            continue
    return str(path)


def _host(name: str, hv: dict[str, Any], groups: frozenset[str], path: Path = Path("inventory")) -> Host:
    def problem(key: str, want: str) -> InventoryError:
        return InventoryError(f"{where(path, name)}: host {name}: {key} is {hv.get(key)!r}, expected {want}",
                              hint=f"correct {key} for {name} in the inventory", host=name)

    if not is_host_name(name):
        raise InventoryError(f"{where(path, name)}: host name {name!r} is not a DNS name or an IP address",
                             hint="name hosts like gpu-01 or gpu-01.example.org (letters, digits, '-', '.'); "
                                  "set ansible_host for another address", host=name)

    state = hv.get("llmgw_node_state", "ready")
    if state not in NODE_STATES:
        raise problem("llmgw_node_state", "one of ready, cordoned, draining")
    deadline = None
    if hv.get(DRAIN_DEADLINE_VAR) is not None:
        try:
            deadline = parse_deadline(hv[DRAIN_DEADLINE_VAR])
        except ValueError as exc:
            # The bad value's own line (the key's first line could be another host's).
            at = where(path, str(hv[DRAIN_DEADLINE_VAR]))
            raise InventoryError(f"{at}: host {name}: {DRAIN_DEADLINE_VAR}: {exc}",
                                 hint=f"correct it, or set it again with `llmgw drain {name} --deadline 1h`",
                                 host=name) from None
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
    # It becomes the replica's endpoint (http://ADDRESS:PORT), which plans and the state hold
    # and check on load (llmgw.state.model): a DNS name or an IP address, as host names are.
    if not isinstance(mgmt, str) or not is_host_name(mgmt):
        key = "llmgw_mgmt_address" if hv.get("llmgw_mgmt_address") else "ansible_host"
        raise problem(key, "an IP address or a DNS name (no spaces, ports, paths, control characters or templates)")
    cordoned = hv.get("llmgw_cordoned_gpus") or []
    if not isinstance(cordoned, list) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                             for i in cordoned):
        raise problem("llmgw_cordoned_gpus", "a list of GPU indices, e.g. [2, 5]")
    unknown = hv.get("llmgw_gpu_health_unknown", "deny")
    if unknown not in ("deny", "allow"):
        raise problem("llmgw_gpu_health_unknown", "deny or allow")
    return Host(name=name, groups=groups, node_state=cast(NodeState, state),
                labels={str(k): str(v) for k, v in labels.items()}, model_dirs=list(dirs),
                cache_dir=cache, mgmt_address=str(mgmt), drain_deadline=deadline, cordoned_gpus=frozenset(cordoned),
                gpu_health_unknown=unknown, vars=hv)


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
    hosts = {n: _host(n, hostvars.get(n, {}), frozenset(groups.get(n, set())), path) for n in sorted(names)}
    return Inventory(path=path, hosts=hosts)


# An inventory read in-process from this many bytes of files or more is memoised, where this process
# memoises (llmgw.facts.memo_in_use: the bastion's CLI; never a router):
# parsing and checking a 4,096-host inventory costs a fifth of a second, its files rarely change.
MEMO_MIN_BYTES = 16 * 1024


def load_inventory(path: Path) -> Inventory:
    if not path.exists():
        raise InventoryError(f"inventory {path} does not exist",
                             hint="set `inventory:` in llmgw.yaml to your Ansible inventory file or folder")
    files = _yaml_files(path)
    memo = memo_in_use()
    key = _memo_key(path, files, memo) if memo is not None else None
    if memo is not None and key is not None:
        found = memo.load("inventory", path.resolve(), key)
        if isinstance(found, Inventory):
            return found
    for f in files:  # before Ansible expands a YAML bomb in its --list output
        try:
            check_yaml_file(f, max_bytes=INVENTORY_FILE_BYTES)
        except FileError as exc:
            raise InventoryError(str(exc), hint="fix the inventory file at that line") from None
    fast = _plain_yaml_inventory(path)
    if fast is not None:
        if memo is not None and key is not None:
            memo.store("inventory", path.resolve(), key, fast)
        return fast
    return _ansible_inventory(path)


def _memo_key(path: Path, files: list[Path], memo: Memo) -> tuple[object, ...] | None:
    """What an in-process read of the inventory is made from: each file's fingerprint (size,
    times, inode: what any write changes), the folder's listing, whether group_vars/host_vars
    are beside it, and the reading code. None: not memoised (small, or Ansible's to read)."""
    if _ansible_configured():
        return None
    base = path if path.is_dir() else path.parent
    try:
        listing = sorted(os.listdir(path)) if path.is_dir() else None
        prints = []
        for f in files:
            st = f.stat()
            prints.append((str(f), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    except OSError:
        return None
    if sum(p[1] for p in prints) < MEMO_MIN_BYTES:
        return None
    return (memo.code_version(("llmgw.inventory", "llmgw.yamlio")), str(path), listing, tuple(prints),
            (base / "group_vars").exists(), (base / "host_vars").exists())


def _ansible_inventory(path: Path) -> Inventory:
    """The inventory as `ansible-inventory --list` prints it (any format Ansible reads)."""
    env = child_env()
    env.setdefault("ANSIBLE_INVENTORY_ENABLED", SAFE_INVENTORY_PLUGINS)
    try:
        proc = subprocess.run([ansible_bin("ansible-inventory"), "-i", str(path.resolve()), "--list"],
                              capture_output=True, text=True, errors="replace", check=False, env=env, cwd="/",
                              timeout=INVENTORY_TIMEOUT_S, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        raise InventoryError(f"Ansible took more than {INVENTORY_TIMEOUT_S} s to read the inventory {path}",
                             hint="check the inventory for huge or self-referencing YAML (anchors, aliases)") from None
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
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise InventoryError(f"ansible-inventory printed no inventory for {path}",
                             hint="run `ansible-inventory -i PATH --list` to see why") from None
    if not isinstance(data, dict):
        raise InventoryError(f"ansible-inventory printed no inventory for {path}")
    return parse_inventory_json(path, data)


def _yaml_files(path: Path) -> list[Path]:
    """The inventory's files that may be YAML (or JSON): what `check_yaml_file` looks at."""
    if path.is_file():
        return [path]
    return sorted(f for f in path.rglob("*") if f.is_file()
                  and not any(p.startswith(".") for p in f.relative_to(path).parts)
                  and (f.suffix in (".yml", ".yaml", ".json", "")
                       or {"group_vars", "host_vars"} & set(f.relative_to(path).parts)))


# Settings that change what a YAML inventory means to Ansible: with any of them set (or a
# configuration file Ansible would read), Ansible itself reads the inventory.
_ANSIBLE_SETTINGS = ("ANSIBLE_CONFIG", "ANSIBLE_INVENTORY_ENABLED", "ANSIBLE_HASH_BEHAVIOUR", "ANSIBLE_PRECEDENCE",
                     "ANSIBLE_VARS_ENABLED", "ANSIBLE_VARS_PLUGINS", "ANSIBLE_INVENTORY_PLUGINS",
                     "ANSIBLE_YAML_FILENAME_EXT", "ANSIBLE_INVENTORY_IGNORE", "ANSIBLE_INVENTORY_IGNORE_REGEX",
                     "ANSIBLE_RUN_VARS_PLUGINS", "ANSIBLE_TRANSFORM_INVALID_GROUP_CHARS",
                     "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "ANSIBLE_INVENTORY_UNPARSED_FAILED")
_SECTIONS = ("hosts", "vars", "children")
_PLAIN_HOST = re.compile(r"^[A-Za-z0-9_.-]+$")  # no range patterns ([1:9]), ports (:22) or IPv6


class _NotPlain(Exception):
    """Something only Ansible should judge: the inventory goes to `ansible-inventory`."""


def _ansible_configured() -> bool:
    """Whether settings or a configuration file could change how Ansible reads a YAML inventory."""
    return any(os.environ.get(k) for k in _ANSIBLE_SETTINGS) or Path("/etc/ansible/ansible.cfg").exists() \
        or (Path.home() / ".ansible.cfg").exists()


def _plain_yaml_inventory(path: Path) -> Inventory | None:
    """The inventory read in-process when it is plain YAML data (see the module's docstring), else None."""
    if _ansible_configured():
        return None
    if path.is_file():
        base, files = path.parent, [path]
    elif path.is_dir():
        base = path
        files = []
        for entry in sorted(os.listdir(path)):
            f = path / entry
            if entry.startswith("."):
                continue
            if not f.is_file() or f.suffix not in (".yml", ".yaml"):
                return None
            files.append(f)
    else:
        return None
    if not files or any(f.suffix not in (".yml", ".yaml") for f in files) \
            or (base / "group_vars").exists() or (base / "host_vars").exists():
        return None
    import yaml  # PyYAML, which Ansible reads YAML with; libyaml's C loader where present

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    reader = _YamlInventory()
    try:
        for f in files:
            data = yaml.load(f.read_text(encoding="utf-8"), Loader=loader)
            if not isinstance(data, dict) or not data or "plugin" in data:
                return None
            for group, group_data in data.items():
                reader.group(group, group_data)
        return reader.inventory(path)
    except (_NotPlain, yaml.YAMLError, UnicodeDecodeError, OSError, RecursionError):
        return None


def _plain_value(value: Any, depth: int = 0) -> None:
    """Refuse what would not survive ansible-inventory's JSON unchanged (dates, sets, bytes, int keys)."""
    if depth > 64:
        raise _NotPlain
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotPlain
            _plain_value(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _plain_value(v, depth + 1)
    elif not (value is None or isinstance(value, str | int | float)):
        raise _NotPlain


class _YamlInventory:
    """What Ansible's yaml inventory plugin and InventoryData build, for plain inventories."""

    def __init__(self) -> None:
        self.group_vars: dict[str, dict[str, Any]] = {"all": {}, "ungrouped": {}}
        self.children: dict[str, list[str]] = {"all": [], "ungrouped": []}
        self.parents: dict[str, set[str]] = {"all": set(), "ungrouped": {"all"}}
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.direct: dict[str, set[str]] = {}  # host -> groups naming it

    def _add_group(self, name: Any) -> str:
        if not isinstance(name, str) or not name:
            raise _NotPlain
        if name not in self.group_vars:
            self.group_vars[name], self.children[name], self.parents[name] = {}, [], set()
        return name

    def group(self, name: Any, data: Any) -> str:
        if not isinstance(data, dict | type(None)):
            raise _NotPlain  # Ansible skips it with a warning: let Ansible say so
        group = self._add_group(name)
        for key, section in (data or {}).items():
            if key not in _SECTIONS or not isinstance(section, dict | type(None)):
                raise _NotPlain  # a string section, a list, an unknown key: Ansible's own handling
            if key == "vars":
                for var, value in (section or {}).items():
                    if not isinstance(var, str) or var == "ansible_group_priority":
                        raise _NotPlain
                    _plain_value(value)
                    self.group_vars[group][var] = value
            elif key == "children":
                for sub, sub_data in (section or {}).items():
                    child = self.group(sub, sub_data)
                    if child in ("all", "ungrouped", group) or group == "ungrouped":
                        raise _NotPlain
                    if child not in self.children[group]:
                        self.children[group].append(child)
                    self.parents[child].add(group)
            else:
                for host, hv in (section or {}).items():
                    if not isinstance(host, str) or not _PLAIN_HOST.match(host) \
                            or not isinstance(hv, dict | type(None)):
                        raise _NotPlain
                    own = self.host_vars.setdefault(host, {})
                    self.direct.setdefault(host, set()).add(group)
                    for var, value in (hv or {}).items():
                        if not isinstance(var, str):
                            raise _NotPlain
                        _plain_value(value)
                        own[var] = value
        return group

    def inventory(self, path: Path) -> Inventory:
        # Groups without a parent hang off `all` (Ansible's reconcile); depth: the longest path from `all`.
        for g, ps in self.parents.items():
            if g != "all" and not ps:
                ps.add("all")
        depth: dict[str, int] = {}
        visiting: set[str] = set()

        def depth_of(g: str) -> int:
            if g == "all":
                return 0
            if g not in depth:
                if g in visiting:
                    raise _NotPlain  # a loop: Ansible refuses it, in its words
                visiting.add(g)
                depth[g] = 1 + max(depth_of(p) for p in self.parents[g])
                visiting.discard(g)
            return depth[g]

        ancestors: dict[str, frozenset[str]] = {}

        def ancestors_of(g: str) -> frozenset[str]:
            if g not in ancestors:
                found = {g}
                for p in self.parents[g]:
                    found |= ancestors_of(p)
                ancestors[g] = frozenset(found)
            return ancestors[g]

        for g in self.group_vars:
            depth_of(g)
        hosts: dict[str, Host] = {}
        for name in sorted(self.host_vars):
            groups: set[str] = {"all"}
            for g in self.direct[name]:
                groups |= ancestors_of(g)
            if groups <= {"all", "ungrouped"}:
                groups.add("ungrouped")
            else:
                groups.discard("ungrouped")  # Ansible takes it out of ungrouped once it is in another group
            hv: dict[str, Any] = dict(self.group_vars["all"])
            for g in sorted(groups - {"all"}, key=lambda g: (depth[g], 1, g)):
                hv.update(self.group_vars[g])
            hv.update(self.host_vars[name])
            hosts[name] = _host(name, hv, frozenset(groups), path)
        return Inventory(path=path, hosts=hosts)


def _limit_memory() -> None:  # in the ansible-inventory child, before it starts
    resource.setrlimit(resource.RLIMIT_AS, (INVENTORY_MEMORY_BYTES, INVENTORY_MEMORY_BYTES))
