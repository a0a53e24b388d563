"""`fleet.json`, the fleet in numbers apply ships to the routers: its schema and its reader.

GPUs per class and state, node memory, disk free and total per node and filesystem, free
whole nodes per fabric, and on how many of each fabric's nodes each model's weights are
present (#35). Apply summarises them on the bastion (llmgw.views.fleet) and ships the
summary as `fleet.json` in the dashboard's site copy (llmgw.apply.dashboard_site); a router
exports it (llmgw.router.fleet_gauges) without reading a facts file.

Apart from the summarising, and importing nothing of llmgw.views: that needs the views of
the nodes and of the capacity, which the router, reading only this file, must not load (#34).

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
