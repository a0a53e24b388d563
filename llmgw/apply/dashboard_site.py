"""The routers' dashboard copy of the site, packed into one archive.

Each router's dashboard reads a copy of the site's catalog, facts and inventory. Ansible's
`copy` of a folder runs a module per file, changed or not: 0.9 s of control-host CPU a file
measured here, so a 4,096-host fleet's facts folder cost about an hour per router on every
apply that reconverges the routers. One archive is one checksum and, when it changed, one
transfer and one unpack (llmgw_router's configure tasks).

The inventory is not copied as it is: an inventory file may hold secrets beside the hosts
(`llmgw_weights_hf_token`, `ansible_become_password`, a store URL with its password), and
the dashboard only needs to know which hosts are in which groups and the few host vars
llmgw reads (DASHBOARD_VARS). `hosts.yml` in the archive is written from the inventory as
llmgw reads it (any form Ansible accepts), holding those vars alone: an allow-list, so a
secret under a name nobody thought of stays on the control host too.

What the dashboard shows as unplaceable, the fleet gauges' numbers and the fabrics are made
on the bastion, at apply, and shipped as `placement.json`, `fleet.json`, `fabrics.json` and a
`fabric-<id>.json` per fabric (llmgw.views.placement, llmgw.fleetfile, llmgw.views.fabric_copy):
the router process imports neither the planner nor the fabric parser (#34).

The archive is deterministic (names sorted, times, owners and modes fixed), so the same
files give the same bytes and an unchanged site is not sent again. It holds only plain
files: a link is followed only when it stays inside its folder (as the catalog's loader
allows); one that leaves it is refused, so no file from elsewhere on the control host
reaches a router.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from llmgw.errors import RunnerError
from llmgw.inventory import Inventory, load_inventory
from llmgw.yamlio import dumps_yaml

FILE_MODE = 0o640
DIR_MODE = 0o750
# The host vars the dashboard reads (llmgw.inventory's Host fields, placement's failure
# domain, the shared weights caches, engine venv folders, the router's listeners): nothing
# else of the inventory reaches a router.
DASHBOARD_VARS = frozenset({
    "ansible_host", "llmgw_node_state", "llmgw_labels", "llmgw_model_dirs", "llmgw_cache_dir",
    "llmgw_mgmt_address", "llmgw_failure_domain", "llmgw_shared_dirs", "llmgw_engine_venv_dirs",
    "llmgw_router_listen", "llmgw_router_admin_listen",
})
# Groups every host is in: Ansible makes them, an inventory need not name them.
_IMPLICIT_GROUPS = frozenset({"all", "ungrouped"})


def _info(name: str, *, size: int = 0, folder: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if folder else tarfile.REGTYPE
    info.mode = DIR_MODE if folder else FILE_MODE
    info.size = size
    info.mtime = 0  # the same files, the same archive
    return info


def _files(folder: Path) -> list[tuple[str, Path]]:
    """(name under the folder, file) for every plain file, links resolved inside the folder."""
    top = folder.resolve()
    out: list[tuple[str, Path]] = []
    for path in sorted(folder.rglob("*")):
        real = path.resolve()
        if not real.is_relative_to(top):
            raise RunnerError(f"{path} is a link to {real}, outside {folder}",
                              hint="the routers' dashboards get a copy of this folder: make it a plain file")
        if real.is_file():
            out.append((path.relative_to(folder).as_posix(), real))
    return out


@dataclass(frozen=True)
class DashboardSite:
    """Where the site's parts are on the control host (a missing facts folder or inventory
    is left out: the dashboard says what it does not know). `inventory` is a file or a
    folder, as `inventory:` in llmgw.yaml names it. `planned` makes, when the archive is
    packed, the files planned for the routers (llmgw.views.planned.site_copy_files: file name
    -> bytes, at the archive's top); None: none shipped, and the dashboard says it does not know."""

    catalog: Path
    facts: Path
    inventory: Path
    planned: Callable[[], Mapping[str, bytes]] | None = None

    def pack(self, dest: Path) -> Path:
        """Write `catalog/`, `facts/`, `hosts.yml` and the planned files as the routers read them to `dest`."""
        with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
            for prefix, folder in (("catalog", self.catalog), ("facts", self.facts)):
                if folder.is_dir():
                    _add_folder(tar, prefix, folder)
            if self.inventory.exists():
                _add_bytes(tar, "hosts.yml", dashboard_inventory(load_inventory(self.inventory)).encode())
            for name, data in sorted((self.planned() if self.planned is not None else {}).items()):
                if "/" in name or name.startswith(".") or name in ("catalog", "facts", "hosts.yml"):
                    raise ValueError(f"a planned file must be a plain name beside hosts.yml, not {name!r}")
                _add_bytes(tar, name, data)
        return dest


def dashboard_inventory(inventory: Inventory) -> str:
    """The inventory as a router's dashboard reads it: every host in the same groups, with
    only the DASHBOARD_VARS of its (merged) host vars; YAML, the same text for the same hosts."""
    hosts: dict[str, dict[str, object]] = {}
    groups: dict[str, dict[str, None]] = {}
    for name in sorted(inventory.hosts):
        host = inventory.hosts[name]
        hosts[name] = {k: host.vars[k] for k in sorted(host.vars) if k in DASHBOARD_VARS}
        for group in sorted(host.groups - _IMPLICIT_GROUPS):
            groups.setdefault(group, {})[name] = None
    doc = {"all": {"hosts": hosts, "children": {g: {"hosts": groups[g]} for g in sorted(groups)}}}
    return "# Written by llmgw apply for the router's dashboard: the hosts, their groups, no secrets.\n" \
        + dumps_yaml(doc)


def _add_folder(tar: tarfile.TarFile, prefix: str, folder: Path) -> None:
    tar.addfile(_info(prefix, folder=True))
    made = {prefix}
    for name, path in _files(folder):
        parts = f"{prefix}/{name}".split("/")[:-1]
        for i in range(2, len(parts) + 1):  # each folder once, before its first file
            sub = "/".join(parts[:i])
            if sub not in made:
                made.add(sub)
                tar.addfile(_info(sub, folder=True))
        _add_file(tar, f"{prefix}/{name}", path)


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    _add_bytes(tar, name, path.read_bytes())


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, size=len(data)), io.BytesIO(data))
