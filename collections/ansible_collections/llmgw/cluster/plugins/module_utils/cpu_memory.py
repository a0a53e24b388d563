# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""A host's memory and CPUs as its processes see them: the smaller of the machine and its cgroup.

Pure Python, no Ansible import (see host_io). Unknown is None, never 0.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Optional

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import FactDict, host_path, read_text
from ansible_collections.llmgw.cluster.plugins.module_utils.mounts import unescape

MIB = 1024 * 1024
# A cgroup limit at or above this means "no limit" (v1 writes PAGE_COUNTER_MAX pages).
_UNLIMITED = 1 << 60


def meminfo_total_mb(root: str = "/") -> Optional[int]:
    """MemTotal from /proc/meminfo, in MiB."""
    text = read_text(host_path(root, "/proc/meminfo"))
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) // 1024  # kB
    return None


def _self_cgroups(root: str) -> Dict[str, str]:
    """controller -> cgroup path of this process ("" is the v2 unified hierarchy)."""
    out: Dict[str, str] = {}
    for line in (read_text(host_path(root, "/proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            out[controller] = parts[2]
    return out


def _mount_root(root: str, mount_point: str) -> str:
    """The cgroup path mounted at `mount_point` ("/" unless a container sees only its own)."""
    for line in (read_text(host_path(root, "/proc/self/mountinfo")) or "").splitlines():
        fields = line.split()
        if len(fields) > 4 and unescape(fields[4]) == mount_point:
            return unescape(fields[3])
    return "/"


def _ancestors(base: str, cgroup_path: str, mounted: str = "/") -> Iterator[str]:
    """`base`/cgroup_path and every folder above it up to `base` itself.

    `mounted` is the part of the hierarchy mounted at `base`: with the host's cgroup
    namespace a container sees its own cgroup path in /proc/self/cgroup, but only its
    subtree under /sys/fs/cgroup, so that prefix is taken off.
    """
    if mounted not in ("", "/") and (cgroup_path == mounted or cgroup_path.startswith(mounted.rstrip("/") + "/")):
        cgroup_path = cgroup_path[len(mounted.rstrip("/")):]
    rel = cgroup_path.strip("/")
    while True:
        yield os.path.join(base, rel) if rel else base
        if not rel:
            return
        rel = os.path.dirname(rel)


def _limit_value(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    value = text.strip()
    if not value or value == "max" or not value.isdigit():
        return None
    n = int(value)
    return n if n < _UNLIMITED else None


def cgroup_memory_limit_mb(root: str = "/") -> Optional[int]:
    """The tightest memory limit of the cgroups this process sits in (v1 or v2), in MiB.

    Walks from this process's cgroup up to the mounted root, because inside a container
    the limit is set on the container's cgroup, which is the root of its view.
    """
    groups = _self_cgroups(root)
    limits: List[int] = []
    v2 = groups.get("")
    if v2 is not None and os.path.exists(host_path(root, "/sys/fs/cgroup/cgroup.controllers")):
        for folder in _ancestors(host_path(root, "/sys/fs/cgroup"), v2, _mount_root(root, "/sys/fs/cgroup")):
            value = _limit_value(read_text(os.path.join(folder, "memory.max")))
            if value is not None:
                limits.append(value)
    v1 = groups.get("memory")
    if v1 is not None:
        for mount in ("/sys/fs/cgroup/memory",):
            for folder in _ancestors(host_path(root, mount), v1, _mount_root(root, mount)):
                value = _limit_value(read_text(os.path.join(folder, "memory.limit_in_bytes")))
                if value is not None:
                    limits.append(value)
    return min(limits) // MIB if limits else None


def memory_facts(root: str = "/") -> FactDict:
    """What the host can really use: MemTotal, or a lower cgroup limit (containers)."""
    total = meminfo_total_mb(root)
    limit = cgroup_memory_limit_mb(root)
    usable = total
    if limit is not None and (usable is None or limit < usable):
        usable = limit
    return {"meminfo_total_mb": total, "cgroup_limit_mb": limit, "total_mb": usable}


# ---------------------------------------------------------------------------- CPUs

def _count_cpu_list(text: str) -> Optional[int]:
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()):
                return None
            count += int(hi) - int(lo) + 1
        elif part.isdigit():
            count += 1
        else:
            return None
    return count or None


def cpu_count(root: str = "/") -> Optional[int]:
    """CPUs this process may run on (affinity), lowered by a cgroup CPU quota."""
    allowed = None
    for line in (read_text(host_path(root, "/proc/self/status")) or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            allowed = _count_cpu_list(line.split(":", 1)[1])
    if allowed is None:
        text = read_text(host_path(root, "/sys/devices/system/cpu/online"))
        allowed = _count_cpu_list(text) if text else None
    quota = _cgroup_cpu_quota(root)
    if quota is not None and (allowed is None or quota < allowed):
        return quota
    return allowed


def _cgroup_cpu_quota(root: str) -> Optional[int]:
    groups = _self_cgroups(root)
    best: Optional[int] = None
    v2 = groups.get("")
    if v2 is not None and os.path.exists(host_path(root, "/sys/fs/cgroup/cgroup.controllers")):
        for folder in _ancestors(host_path(root, "/sys/fs/cgroup"), v2, _mount_root(root, "/sys/fs/cgroup")):
            parts = (read_text(os.path.join(folder, "cpu.max")) or "").split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) > 0:
                cpus = max(1, -(-int(parts[0]) // int(parts[1])))
                best = cpus if best is None else min(best, cpus)
    v1 = groups.get("cpu")
    if v1 is not None:
        for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
            for folder in _ancestors(host_path(root, mount), v1, _mount_root(root, mount)):
                q = (read_text(os.path.join(folder, "cpu.cfs_quota_us")) or "").strip()
                p = (read_text(os.path.join(folder, "cpu.cfs_period_us")) or "").strip()
                if q.isdigit() and p.isdigit() and int(p) > 0:
                    cpus = max(1, -(-int(q) // int(p)))
                    best = cpus if best is None else min(best, cpus)
    return best
