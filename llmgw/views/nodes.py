"""Per node: inventory state, GPUs (free of healthy, who holds each), memory, disk, fabrics,
weights, and whether it stopped answering (`condition`: unreachable, then lost; llmgw.nodetime).

A value a host did not report is None (the pages print `-`): unknown is not zero. The
fields of the list match `llmgw nodes --json`, so the dashboard's table and the CLI's agree.
"""

from __future__ import annotations

from typing import Any

from llmgw.facts import Filesystem, HostFacts
from llmgw.gpus import gpu_left_out
from llmgw.nodetime import liveness
from llmgw.views.held import node_weights
from llmgw.views.placement import Held
from llmgw.views.sitedata import SiteData
from llmgw.views.text import iso
from llmgw.views.versions import UNKNOWN, fleet_versions, stack_text


def gpu_holders(data: SiteData) -> dict[str, dict[int, str]]:
    """node -> GPU index -> the replica holding it, from the state."""
    out: dict[str, dict[int, str]] = {}
    for r in data.state.replicas:
        for s in r.shards:
            for g in s.gpus:
                out.setdefault(s.node, {})[g] = r.id
    return out


def replicas_by_node(data: SiteData) -> dict[str, list[str]]:
    """node -> the ids of the replicas with a shard there, sorted (one pass over the state:
    scanning every replica per node made `nodes` quadratic, 38 s at 4,096 hosts)."""
    out: dict[str, set[str]] = {}
    for r in data.state.replicas:
        for s in r.shards:
            out.setdefault(s.node, set()).add(r.id)
    return {node: sorted(ids) for node, ids in out.items()}


def fabrics_of(data: SiteData, host: str, facts: HostFacts | None) -> list[str] | None:
    """Fabric ids of the host; [] when it has no active InfiniBand port; None when not known."""
    ids = data.fabric_map.fabrics_of(host)
    if ids:
        return ids
    if facts is None or facts.ib_adapters is None:
        return None
    # On no fabric because it has no active InfiniBand port: none. Active ports no map covers: unknown.
    active = [p for a in facts.ib_adapters for p in a.ports
              if p.state == "ACTIVE" and (p.link_layer or "InfiniBand") == "InfiniBand"]
    return None if active else []


def disk_record(filesystems: list[Filesystem]) -> dict[str, Any]:
    """Free and total disk: local pools are what weights fill; shared filers are listed apart, not added in."""
    local = [f for f in filesystems if not f.shared]
    shared = [f for f in filesystems if f.shared]
    return {"free_bytes": sum(f.free_bytes for f in local) if local else None,
            "total_bytes": sum(f.total_bytes for f in local) if local else None,
            "shared_free_bytes": sum(f.free_bytes for f in shared) if shared else None,
            "shared_total_bytes": sum(f.total_bytes for f in shared) if shared else None,
            "filesystems": [f.model_dump(mode="json") for f in filesystems]}


def node_record(data: SiteData, name: str, holders: dict[int, str], replicas: list[str], held: Held) -> dict[str, Any]:
    """`replicas`: the node's entry of `replicas_by_node`; `held`: `data.held`."""
    host = data.inventory.nodes[name]
    facts = data.facts.get(name)
    rec: dict[str, Any] = {
        "node": name, "state": host.node_state, "labels": dict(host.labels), "address": host.mgmt_address,
        "gpus": None, "gpus_unknown_reason": None, "classes": None, "memory_mb": None, "cpus": None,
        "disk": None, "fabrics": fabrics_of(data, name, facts), "replicas": replicas, "last_seen": None,
        "stale_since": None, "stale_reason": None, "unhealthy_gpus": [], "weights": None,
        "gpu_driver": None, "cuda_version": None, "left_out_gpus": [],
        "fabric_manager": None, "rdma_core": None, "ofed": None, "stack": UNKNOWN,
        "drain_deadline": iso(host.drain_deadline) if host.drain_deadline and host.node_state == "draining" else None,
        "condition": None, "condition_reason": None, "lost_at": None,
    }
    if facts is None:
        return rec
    rec["weights"] = node_weights(held, name, None if facts.weights is None else
                                  {w.path: (w.size_bytes, w.cache) for w in facts.weights})
    config = data.site.config  # judged at the plan's clock, so the view and the plan agree
    lv = liveness(facts, data.clock, config.unreachable_after, config.lost_after)
    if lv is not None:  # unreachable: takes nothing new; lost: its replicas are replaced
        rec.update(condition=lv.condition, condition_reason=lv.sentence(name), lost_at=iso(lv.lost_at))
    rec["last_seen"] = iso(facts.gathered_at)
    rec["stale_since"] = iso(facts.stale_since) if facts.stale_since else None
    rec["stale_reason"] = facts.stale_reason
    rec["memory_mb"] = facts.memory_total_mb
    rec["cpus"] = facts.cpus
    rec["gpu_driver"], rec["cuda_version"] = facts.gpu_driver, facts.cuda_version
    rec["fabric_manager"], rec["rdma_core"], rec["ofed"] = facts.fabric_manager, facts.rdma_core, facts.ofed
    rec["stack"] = stack_text(rec)
    if facts.gpus is None:
        rec["gpus_unknown_reason"] = facts.gpus_unknown_reason
    else:
        healthy = {g.index for g in facts.gpus if g.healthy}
        used = set(holders) & healthy
        rec["gpus"] = {"total": len(facts.gpus), "healthy": len(healthy), "used": len(used),
                       "free": len(healthy - used)}
        rec["classes"] = sorted({g.gpu_class for g in facts.gpus})
        rec["unhealthy_gpus"] = [{"index": g.index, "uuid": g.uuid, "gpu_class": g.gpu_class,
                                  "problems": list(g.problems)} for g in facts.gpus if not g.healthy]
        # Healthy by their facts, yet not placed: cordoned by hand, or of unknown health.
        rec["left_out_gpus"] = [{"index": g.index, "gpu_class": g.gpu_class, "why": why} for g in facts.gpus
                                if g.healthy and (why := gpu_left_out(g, host, facts.fabric_manager)) is not None]
    if facts.filesystems is not None:
        rec["disk"] = disk_record(facts.filesystems)
    return rec


def nodes_view(data: SiteData) -> dict[str, Any]:
    holders, replicas, held = gpu_holders(data), replicas_by_node(data), data.held
    nodes = [node_record(data, n, holders.get(n, {}), replicas.get(n, []), held) for n in sorted(data.inventory.nodes)]
    # `versions`: hosts per driver, CUDA, rdma-core and OFED version (llmgw.views.versions).
    return {"nodes": nodes, "versions": fleet_versions(nodes), "notes": list(data.notes)}


def node_detail(data: SiteData, name: str) -> dict[str, Any] | None:
    """One node in full: the list record plus every GPU, unit, weights entry and adapter."""
    if name not in data.inventory.nodes:
        return None
    holders = gpu_holders(data).get(name, {})
    rec = node_record(data, name, holders, replicas_by_node(data).get(name, []), data.held)
    facts = data.facts.get(name)
    rec["gpu_list"] = None if facts is None or facts.gpus is None else [
        {"index": g.index, "name": g.name, "gpu_class": g.gpu_class, "memory_total_mb": g.memory_total_mb,
         "healthy": g.healthy, "problems": list(g.problems), "replica": holders.get(g.index),
         "health": g.health, "notes": list(g.notes), "unknown": list(g.unknown), "pci_bus_id": g.pci_bus_id,
         "vbios": g.vbios}
        for g in sorted(facts.gpus, key=lambda g: g.index)]
    rec["units"] = None if facts is None or facts.units is None else [u.model_dump(mode="json") for u in facts.units]
    rec["units_unknown_reason"] = facts.units_unknown_reason if facts else None
    rec["engines"] = facts.engines if facts else None
    rec["adapters"] = data.fabrics.adapters(name)
    rec["ib_adapters"] = None if facts is None or facts.ib_adapters is None else [
        a.model_dump(mode="json") for a in facts.ib_adapters]
    return rec
