# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""InfiniBand adapters from sysfs, and raw `ibnetdiscover` text: pure Python, no Ansible.

Parsing the fabric happens on the control side (llmgw.fabric); a host only reports
what it sees and, when asked, the tool's raw output.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.llmgw.cluster.plugins.module_utils.topology import (
    device_bus_id,
    numa_node,
    pci_root,
    read_text,
)

Run = Callable[[List[str]], Tuple[int, str, str]]
FactDict = Dict[str, Any]

IB_CLASS = "/sys/class/infiniband"
MISSING_TOOL = "ibnetdiscover is not installed (Debian/Ubuntu: infiniband-diags, RHEL: infiniband-diags)"


def guid(text: Optional[str]) -> Optional[str]:
    """`b83f:d203:00a2:0000` (sysfs) or `0xb83f...` -> `0xb83fd20300a20000` (16 hex digits)."""
    if not text:
        return None
    digits = text.strip().lower().replace(":", "")
    if digits.startswith("0x"):
        digits = digits[2:]
    try:
        return "0x%016x" % int(digits, 16)
    except ValueError:
        return None


def port_guid_from_gid(gid: Optional[str]) -> Optional[str]:
    """The port GUID is the low 64 bits of GID 0 (`fe80:0000:0000:0000:b83f:d203:00a2:0001`)."""
    if not gid:
        return None
    groups = gid.strip().split(":")
    if len(groups) != 8:
        return None
    value = guid("".join(groups[4:]))
    return None if value == "0x%016x" % 0 else value


def _state(text: Optional[str]) -> str:
    """`4: ACTIVE` -> `ACTIVE`."""
    if not text:
        return "UNKNOWN"
    return text.split(":", 1)[-1].strip() or "UNKNOWN"


def _int(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def read_adapters(root: str = "/") -> List[FactDict]:
    """Every adapter under /sys/class/infiniband with its ports; [] when there is none."""
    base = os.path.join(root, IB_CLASS.lstrip("/"))
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    adapters: List[FactDict] = []
    for name in names:
        folder = os.path.join(base, name)
        ports: List[FactDict] = []
        try:
            port_names = sorted(os.listdir(os.path.join(folder, "ports")), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            port_names = []
        for port in port_names:
            if not port.isdigit():
                continue
            pdir = os.path.join(folder, "ports", port)
            ports.append({
                "port": int(port),
                "state": _state(read_text(os.path.join(pdir, "state"))),
                "rate": read_text(os.path.join(pdir, "rate")),
                "link_layer": read_text(os.path.join(pdir, "link_layer")),
                "port_guid": port_guid_from_gid(read_text(os.path.join(pdir, "gids", "0"))),
                # Not facts llmgw keeps; used to tell fabrics apart when choosing probes.
                "_sm_lid": _int(read_text(os.path.join(pdir, "sm_lid"))),
                "_subnet_prefix": (read_text(os.path.join(pdir, "gids", "0")) or "")[:19] or None,
            })
        bus = device_bus_id(root, os.path.join(IB_CLASS, name, "device"))
        adapters.append({"name": name, "node_guid": guid(read_text(os.path.join(folder, "node_guid"))),
                         "node_desc": read_text(os.path.join(folder, "node_desc")), "ports": ports,
                         # Where it sits, so NCCL is given the adapters nearest a shard's GPUs.
                         "pci_bus_id": bus, "numa_node": numa_node(root, bus), "pci_root": pci_root(root, bus)})
    return adapters


def rdma_stack(run: Run) -> FactDict:
    """The RDMA userspace: rdma-core's package version (dpkg, else rpm) and MLNX_OFED's
    (`ofed_info -s`, only where it is installed); None each when not known."""
    found: FactDict = {"rdma_core": None, "ofed": None}
    for argv in (["dpkg-query", "-W", "-f", "${Version}", "rdma-core"],
                 ["rpm", "-q", "--qf", "%{VERSION}", "rdma-core"]):
        rc, out, _err = run(argv)
        if rc == 0 and out.strip() and " " not in out.strip():
            found["rdma_core"] = out.strip()[:64]
            break
    rc, out, _err = run(["ofed_info", "-s"])
    if rc == 0 and out.strip():  # "MLNX_OFED_LINUX-24.10-1.1.4.0:"
        found["ofed"] = out.strip().splitlines()[0].rstrip(":").replace("MLNX_OFED_LINUX-", "")[:64]
    return found


def active_ib_ports(adapters: List[FactDict]) -> List[Tuple[str, FactDict]]:
    """(adapter name, port) for every ACTIVE port whose link layer is InfiniBand."""
    return [(a["name"], p) for a in adapters for p in a["ports"]
            if p["state"] == "ACTIVE" and (p.get("link_layer") or "InfiniBand") == "InfiniBand"]


def fabric_key(adapters: List[FactDict]) -> str:
    """A signature of the fabrics this host's active ports see (subnet prefix / SM LID).

    Hosts with the same signature are taken to sit on the same fabrics, so one of them
    is enough to run ibnetdiscover for all; "" for a host without active IB ports.
    """
    keys = sorted({"%s/%s" % (p.get("_subnet_prefix"), p.get("_sm_lid")) for _, p in active_ib_ports(adapters)})
    return ",".join(keys)


def public_adapters(adapters: List[FactDict]) -> List[FactDict]:
    """The adapters without the internal `_` keys."""
    return [dict(a, ports=[{k: v for k, v in p.items() if not k.startswith("_")} for p in a["ports"]])
            for a in adapters]


def run_ibnetdiscover(adapters: List[FactDict], run: Run, program: str = "ibnetdiscover",
                      ) -> Tuple[Optional[str], Optional[str]]:
    """(text, reason): `ibnetdiscover` once per distinct fabric this host's ports reach.

    Starts from the first active port; a later port whose GUID already appears in an
    earlier output is on a fabric already mapped. Several outputs are joined, each a
    complete topology file with its own `# Topology file` header.
    """
    ports = active_ib_ports(adapters)
    if not ports:
        return None, "no active InfiniBand port on this host"
    outputs: List[str] = []
    reasons: List[str] = []
    for ca, port in ports:
        pg = port.get("port_guid")
        if pg and any(("%x" % int(pg, 16)) in out.lower() for out in outputs):
            continue
        rc, out, err = run([program, "-C", ca, "-P", str(port["port"])])
        if rc == 127:
            return None, MISSING_TOOL
        if rc != 0 or not out.strip():
            last = (err.strip().splitlines() or ["exit %d" % rc])[-1]
            reasons.append("ibnetdiscover on %s port %s failed: %s" % (ca, port["port"], last))
            continue
        outputs.append(out if out.endswith("\n") else out + "\n")
    if not outputs:
        return None, "; ".join(reasons) or "ibnetdiscover printed nothing"
    return "\n".join(outputs), ("; ".join(reasons) or None)
