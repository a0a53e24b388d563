"""The fleet in numbers, for the routers' /metrics: summarised on the bastion at apply, shipped.

GPUs per class and state, node memory, disk free and total per node and filesystem, free
whole nodes per fabric, and on how many of each fabric's nodes each model's weights are
present (#35). The facts, the inventory and the planner's rule for "holds the weights"
are on the bastion; apply summarises them there (llmgw.views.planned.fleet_summary) and
ships the summary as `fleet.json` in the dashboard's site copy (llmgw.apply.dashboard_site).
A router exports it (llmgw.router.fleet_gauges) without reading a facts file.

Unknown is absent, never zero: a node whose GPUs are not known is in no GPU class, one
whose memory or filesystems are not known has no such series, a GPU class with any GPU
of unknown memory has no memory series, and a fabric none of whose nodes reported their
weights has no weights series. A summary that cannot be read is no summary: nothing
exported, and the reason logged once by the router.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmgw.views.nodes import gpu_holders
from llmgw.views.sitedata import SiteData
from llmgw.views.status import capacity, whole_nodes

FLEET_FILE = "fleet.json"  # beside hosts.yml in the dashboard's site copy
_NAME = 256
_COUNT = Field(ge=0)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuClass(_Record):
    gpu_class: str = Field(max_length=_NAME)
    nodes: int = _COUNT
    free: int = _COUNT  # healthy, unheld, on a ready node
    used: int = _COUNT  # held by a replica
    held_back: int = _COUNT  # healthy and unheld, on a cordoned or draining node or left out (llmgw.gpus)
    unhealthy: int = _COUNT
    memory_total_bytes: int | None = Field(default=None, ge=0)  # None: a GPU of the class did not say
    memory_used_bytes: int | None = Field(default=None, ge=0)


class NodeNumbers(_Record):
    node: str = Field(max_length=_NAME)
    gathered_at: float  # the facts' time (Unix seconds): stale facts show as old, not as fresh
    memory_total_bytes: int | None = Field(default=None, ge=0)


class NodeFilesystem(_Record):
    node: str = Field(max_length=_NAME)
    mount: str = Field(max_length=4096)
    shared: bool
    free_bytes: int = _COUNT
    total_bytes: int = _COUNT


class FabricNodes(_Record):
    fabric: str = Field(max_length=_NAME)
    nodes: int = _COUNT
    free_whole_nodes: int = _COUNT


class FabricWeights(_Record):
    fabric: str = Field(max_length=_NAME)
    model: str = Field(max_length=_NAME)
    nodes: int = _COUNT  # of the fabric's nodes whose weights are known, how many hold the model's


class FleetSummary(_Record):
    version: Literal[1] = 1  # another is refused by name (read_fleet)
    gpus: tuple[GpuClass, ...] = ()
    nodes: tuple[NodeNumbers, ...] = ()
    filesystems: tuple[NodeFilesystem, ...] = ()
    fabrics: tuple[FabricNodes, ...] = ()
    weights: tuple[FabricWeights, ...] = ()

    def to_json(self) -> str:
        return self.model_dump_json(indent=1) + "\n"


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


def read_fleet(folder: Path) -> tuple[FleetSummary | None, str | None]:
    """The `fleet.json` apply shipped into a router's site copy, or None and why not."""
    path = folder / FLEET_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None, f"no {path}: the fleet gauges come with apply's site copy (run `llmgw apply`)"
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror} (the router's user must be able to read its site copy)"
    try:
        return FleetSummary.model_validate_json(text), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        return None, f"{path} is not a fleet summary apply writes ({where}: {first['msg']}); `llmgw apply` replaces it"
