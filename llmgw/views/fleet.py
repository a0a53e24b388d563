"""The fleet in numbers, for the routers' /metrics: summarised on the bastion at apply.

The facts, the inventory and the planner's rule for "holds the weights" are on the bastion;
apply summarises them here (from llmgw.views.planned.site_copy_files) into the records of
`fleet.json`, which it ships in the dashboard's site copy. The file's schema and its reader,
what a router needs, are llmgw.fleetfile, which says what is absent when it is not known.
"""

from __future__ import annotations

from llmgw.fleetfile import FabricNodes, FabricWeights, FleetSummary, GpuClass, NodeFilesystem, NodeNumbers
from llmgw.views.nodes import gpu_holders
from llmgw.views.sitedata import SiteData
from llmgw.views.status import capacity, whole_nodes


def _mb(n: int | None) -> int | None:
    return None if n is None else n * 1024 * 1024


def summarise(data: SiteData, holders: dict[str, dict[str, set[str]]]) -> FleetSummary:
    """The fleet of `data` in numbers; `holders` is fabric -> model -> the nodes holding its
    weights, by the planner's rule (the bastion has it: views.planned)."""
    held = gpu_holders(data)
    caps, _unknown = capacity(data, held)
    gpus = []
    for c in caps:
        of_class = [g for n in data.inventory.nodes for g in ((data.facts[n].gpus or []) if n in data.facts else [])
                    if g.gpu_class == c["gpu_class"]]
        total = None if any(g.memory_total_mb is None for g in of_class) else \
            sum(g.memory_total_mb or 0 for g in of_class)
        used = None if any(g.memory_used_mb is None for g in of_class) else sum(g.memory_used_mb or 0 for g in of_class)
        gpus.append(GpuClass(gpu_class=c["gpu_class"], nodes=c["nodes"], free=c["free"], used=c["used"],
                             held_back=c["held_back"], unhealthy=c["unhealthy"],
                             memory_total_bytes=_mb(total), memory_used_bytes=_mb(used)))
    nodes, filesystems = [], []
    for name in sorted(data.inventory.nodes):
        f = data.facts.get(name)
        if f is None:
            continue
        nodes.append(NodeNumbers(node=name, gathered_at=f.gathered_at.timestamp(),
                                 memory_total_bytes=_mb(f.memory_total_mb)))
        filesystems += [NodeFilesystem(node=name, mount=fs.mount, shared=fs.shared, free_bytes=fs.free_bytes,
                                       total_bytes=fs.total_bytes) for fs in sorted(f.filesystems or [],
                                                                                    key=lambda fs: fs.mount)]
    fabrics = [FabricNodes(fabric=w["fabric"], nodes=w["nodes"], free_whole_nodes=w["free_whole_nodes"])
               for w in whole_nodes(data, held)]
    weights = []
    for fid in data.fabric_map.glances:
        members = [n for n in sorted(data.inventory.nodes) if fid in data.fabric_map.fabrics_of(n)]
        known = {n for n in members if n in data.facts and data.facts[n].weights is not None}
        if not known:
            continue  # no node of the fabric said what it holds: not known, so no series
        for model in sorted(data.catalog.models):
            weights.append(FabricWeights(fabric=fid, model=model,
                                         nodes=len(holders.get(fid, {}).get(model, set()) & known)))
    return FleetSummary(gpus=tuple(gpus), nodes=tuple(nodes), filesystems=tuple(filesystems),
                        fabrics=tuple(fabrics), weights=tuple(weights))
