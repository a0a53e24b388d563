"""The routers' dashboard copy of the site, packed into one archive.

Each router's dashboard reads a copy of the site's catalog, facts and inventory. Ansible's
`copy` of a folder runs a module per file, changed or not: 0.9 s of control-host CPU a file
measured here, so a 4,096-host fleet's facts folder cost about an hour per router on every
apply that reconverges the routers. One archive is one checksum and, when it changed, one
transfer and one unpack (llmgw_router's configure tasks).

The archive is deterministic (names sorted, times, owners and modes fixed), so the same
files give the same bytes and an unchanged site is not sent again. It holds only plain
files: a link is followed only when it stays inside its folder (as the catalog's loader
allows); one that leaves it is refused, so no file from elsewhere on the control host
reaches a router.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from llmgw.errors import RunnerError

FILE_MODE = 0o640
DIR_MODE = 0o750


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
    is left out: the dashboard says what it does not know)."""

    catalog: Path
    facts: Path
    inventory: Path

    def pack(self, dest: Path) -> Path:
        """Write `catalog/`, `facts/` and `hosts.yml` as the routers' dashboard reads them to `dest`."""
        with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
            for prefix, folder in (("catalog", self.catalog), ("facts", self.facts)):
                if folder.is_dir():
                    _add_folder(tar, prefix, folder)
            if self.inventory.is_file():
                _add_file(tar, "hosts.yml", self.inventory)
        return dest


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
    data = path.read_bytes()
    tar.addfile(_info(name, size=len(data)), io.BytesIO(data))
