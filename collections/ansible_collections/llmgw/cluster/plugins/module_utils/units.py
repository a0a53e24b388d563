# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""llmgw's systemd units on a host and their state, from systemctl.

Pure Python, no Ansible import; the command runner is an argument (see host_io).
"""

from __future__ import annotations

import shlex
from typing import Dict, List, Optional, Tuple

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import FactDict, Run


def llmgw_units(run: Run, pattern: str = "llmgw-*") -> Tuple[Optional[List[FactDict]], Optional[str]]:
    """llmgw's systemd units present on the host and their state: (units, reason if unknown).

    Loaded units come from `list-units --all`; unit files never loaded (installed but
    not started) from `list-unit-files`, as inactive. Templates are not units.
    """
    rc, out, err = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "--full",
                        pattern])
    if rc == 127:
        return None, "systemctl is not installed (no systemd)"
    if rc != 0:
        return None, "systemctl failed: %s" % (err.strip() or "exit %d" % rc)
    units: Dict[str, FactDict] = {}
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) < 4:
            continue
        name, load, active, sub = parts[0].lstrip("●* "), parts[1], parts[2], parts[3]
        if not name or (load == "not-found" and active != "active"):
            continue
        units[name] = {"name": name, "active_state": active, "sub_state": sub}
    rc, out, _err = run(["systemctl", "list-unit-files", "--no-legend", "--no-pager", "--full", pattern])
    if rc == 0:
        for line in out.splitlines():
            parts = line.split()
            if not parts or "@." in parts[0] or parts[0] in units:
                continue
            units[parts[0]] = {"name": parts[0], "active_state": "inactive", "sub_state": "dead"}
    shown = unit_environments(run, [n for n in sorted(units) if not n.startswith("llmgw-router")])
    for name, unit in units.items():
        lineage, gpus, memory_mb = shown.get(name, (None, None, None))
        unit["lineage"] = lineage
        if gpus is not None:  # a shard's GPUs and memory: another state's planner keeps off them
            unit["gpus"] = gpus
        if memory_mb is not None:
            unit["memory_mb"] = memory_mb
    return [units[n] for n in sorted(units)], None


UnitShown = Tuple[Optional[str], Optional[List[int]], Optional[int]]


def unit_environments(run: Run, names: List[str]) -> Dict[str, UnitShown]:
    """Unit -> (LLMGW_LINEAGE, the GPU indices in LLMGW_GPUS or CUDA_VISIBLE_DEVICES, the memory it uses
    now in MiB) in one `systemctl show`; what a unit does not have (or systemctl cannot
    tell) is None. A state's plans keep off the GPUs and memory of another state's units."""
    if not names:
        return {}
    rc, out, _err = run(["systemctl", "show", "--no-pager", "-p", "Id", "-p", "Environment", "-p", "MemoryCurrent",
                         "--", *names])
    found: Dict[str, UnitShown] = {}
    if rc != 0:
        return found
    for block in out.split("\n\n"):
        props: Dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key] = value
        unit = props.get("Id")
        if not unit:
            continue
        try:
            words = shlex.split(props.get("Environment", ""))
        except ValueError:
            words = []
        env = dict(w.split("=", 1) for w in words if "=" in w)
        # LLMGW_GPUS: the indices, where CUDA_VISIBLE_DEVICES names the GPUs by UUID
        found[unit] = (env.get("LLMGW_LINEAGE") or None,
                       _gpu_list(env.get("LLMGW_GPUS")) or _gpu_list(env.get("CUDA_VISIBLE_DEVICES")),
                       _mib(props.get("MemoryCurrent")))
    return found


def _gpu_list(text: Optional[str]) -> Optional[List[int]]:
    """CUDA_VISIBLE_DEVICES as GPU indices; None when unset or not plain indices (UUIDs)."""
    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else None


def _mib(text: Optional[str]) -> Optional[int]:
    """systemd's MemoryCurrent (bytes; `[not set]` or 2^64-1 when not accounted) in MiB."""
    if not text or not text.isdigit() or int(text) >= 2**63:
        return None
    return -(-int(text) // (1024 * 1024))
