# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""The file systems holding model storage: mount, device, type, shared or local, free space.

Pure Python, no Ansible import (see host_io).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import FactDict, host_path, read_text

SHARED_FSTYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "glusterfs",
                            "panfs", "wekafs", "orangefs"})
# FUSE file systems that are local despite the fuse. prefix.
LOCAL_FUSE = frozenset({"fuse.fuse-overlayfs", "fuse.lxcfs", "fuse.squashfuse", "fuse.gvfsd-fuse",
                        "fuse.portal", "fuse.snapfuse", "fuse.appimagefuse"})


class Mount(NamedTuple):
    major: int
    minor: int
    mount_point: str
    fstype: str
    source: str


def unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> List[Mount]:
    """/proc/self/mountinfo lines -> mounts (see proc(5)); malformed lines are skipped."""
    mounts: List[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
            major, minor = fields[2].split(":")
            mounts.append(Mount(int(major), int(minor), unescape(fields[4]), fields[sep + 1],
                                unescape(fields[sep + 2]) if len(fields) > sep + 2 else ""))
        except (ValueError, IndexError):
            continue
    return mounts


def read_mounts(root: str = "/") -> List[Mount]:
    return parse_mountinfo(read_text(host_path(root, "/proc/self/mountinfo")) or "")


def is_shared(fstype: str) -> bool:
    """Network and cluster file systems (NFS, Lustre, GPFS, BeeGFS, CephFS, CIFS, FUSE filers)."""
    if fstype in SHARED_FSTYPES:
        return True
    return fstype.startswith("fuse.") and fstype not in LOCAL_FUSE


def _under(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, dev: int, mounts: List[Mount]) -> Optional[Mount]:
    """The mount a path lives on: same device, deepest mount point above the path.

    Falls back to the deepest mount point above the path when no mount has the device
    (btrfs subvolumes report an anonymous device).
    """
    above = [m for m in mounts if _under(path, m.mount_point)]
    same = [m for m in above if (m.major, m.minor) == (os.major(dev), os.minor(dev))]
    pool = same or above
    if not pool:
        return None
    return max(pool, key=lambda m: len(m.mount_point))


def filesystems(paths: List[str], mounts: List[Mount], stat: Callable[[str], Any] = os.stat,
                statvfs: Callable[[str], Any] = os.statvfs) -> List[FactDict]:
    """One entry per filesystem holding any of `paths`, counted once however many dirs.

    Grouped by device number (st_dev), so two dirs on one disk (or two bind mounts of
    it) are one pool. A missing dir is skipped: it holds nothing, and is not "0 free".
    """
    by_dev: Dict[int, FactDict] = {}
    for raw in paths:
        path = os.path.realpath(raw)
        try:
            st = stat(path)
        except OSError:
            continue
        dev = int(st.st_dev)
        if dev in by_dev:
            if raw not in by_dev[dev]["paths"]:
                by_dev[dev]["paths"].append(raw)
            continue
        try:
            vfs = statvfs(path)
        except OSError:
            continue
        mount = mount_of(path, dev, mounts)
        fstype = mount.fstype if mount else "unknown"
        by_dev[dev] = {
            "mount": mount.mount_point if mount else path,
            "device": mount.source if mount else "%d:%d" % (os.major(dev), os.minor(dev)),
            "fstype": fstype,
            "shared": is_shared(fstype),
            "free_bytes": int(vfs.f_bavail) * int(vfs.f_frsize),
            "total_bytes": int(vfs.f_blocks) * int(vfs.f_frsize),
            "paths": [raw],
        }
    return sorted(by_dev.values(), key=lambda f: str(f["mount"]))
