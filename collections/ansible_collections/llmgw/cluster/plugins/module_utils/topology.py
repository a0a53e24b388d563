# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""Where a PCI device sits: its NUMA node and PCIe root from sysfs, and NVML's topology
level between two GPUs. Pure Python, no Ansible import (gpu.py and ib.py share it).

Placement packs a shard's GPUs at the closest common level (NVLink or one PCIe switch
before a host bridge before crossing the CPU interconnect) and gives NCCL the adapters on
the same PCIe root or NUMA node; these are the facts it needs.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from ansible_collections.llmgw.cluster.plugins.module_utils.xid import pci_key_of_bus_id

# nvmlGpuTopologyLevel_t: part of NVML's C ABI (NVML_TOPOLOGY_CPU is the old name of NODE, 40).
# The names are what facts record: a reader (and the planner) need not know NVML's numbers.
LEVELS = {0: "internal", 10: "single", 20: "multiple", 30: "hostbridge", 40: "node", 50: "system"}

_BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def read_text(path: str) -> Optional[str]:
    """A sysfs attribute's text, stripped; None where the file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def numa_node(root: str, bus_id: Optional[str]) -> Optional[int]:
    """The NUMA node sysfs gives a PCI device (`/sys/bus/pci/devices/<addr>/numa_node`);
    None when not known, including the kernel's -1 (a machine without NUMA information)."""
    if not bus_id or not _BUS_ID.match(bus_id):
        return None
    text = read_text(os.path.join(root, "sys/bus/pci/devices", bus_id, "numa_node"))
    try:
        value = int(text) if text is not None else -1
    except ValueError:
        return None
    return value if 0 <= value < 1024 else None


def pci_root(root: str, bus_id: Optional[str]) -> Optional[str]:
    """The PCIe root complex a device hangs off (`pci0000:15`), from where its sysfs entry
    links to under /sys/devices; None when not known."""
    if not bus_id or not _BUS_ID.match(bus_id):
        return None
    try:
        target = os.readlink(os.path.join(root, "sys/bus/pci/devices", bus_id))
    except OSError:
        return None
    for part in target.split("/"):
        if _ROOT.match(part):
            return part
    return None


def device_bus_id(root: str, device_dir: str) -> Optional[str]:
    """The PCI address of a class device (`/sys/class/infiniband/mlx5_0/device` links to
    `../../../0000:3b:00.0`); None when it is not a PCI device."""
    try:
        target = os.readlink(os.path.join(root, device_dir.lstrip("/")))
    except OSError:
        return None
    name = os.path.basename(target.rstrip("/")).lower()
    return name if _BUS_ID.match(name) else None


def gpu_topology(nvml: Any, handles: Dict[int, Any]) -> Dict[int, Dict[int, str]]:
    """Per GPU index, NVML's level to every other GPU it could answer for (an old driver or
    a lost GPU leaves pairs out: unknown, never guessed)."""
    out: Dict[int, Dict[int, str]] = {i: {} for i in handles}
    fn = getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None)
    if fn is None:
        return out
    indexes = sorted(handles)
    for a in indexes:
        for b in indexes:
            if b <= a:
                continue
            try:
                level = LEVELS.get(int(fn(handles[a], handles[b])))
            except Exception:  # NVMLError: not supported, lost...
                continue
            if level is not None:
                out[a][b] = out[b][a] = level
    return out


def nvlink_peers(nvml: Any, handle: Any, by_bus: Dict[str, int], max_links: int = 18) -> Optional[List[int]]:
    """The GPU indices at the far end of this GPU's active NVLinks; None when the GPU has no
    NVLink (or this pynvml cannot say). NVSwitch ports are not GPUs and are left out: on an
    NVSwitch board NVML's level between any two GPUs already says NVLink (`internal`)."""
    found = set()
    any_link = False
    for link in range(max_links):
        try:
            up = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:  # no such link (links are numbered from 0), no NVLink, an old pynvml
            break
        any_link = True
        if up != 1:  # NVML_FEATURE_ENABLED
            continue
        try:
            info = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except Exception:
            continue
        bus = info.busId.decode("ascii", "replace") if isinstance(info.busId, bytes) else str(info.busId)
        key = pci_key_of_bus_id(bus)
        if key in by_bus:
            found.add(by_bus[key])
    return sorted(found) if any_link else None
