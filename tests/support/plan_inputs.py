"""Small builders for in-memory plan inputs: hosts, facts, catalogs, without files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from llmgw.catalog import Model
from llmgw.catalog.load import Catalog, Located
from llmgw.facts.records import Filesystem, Gpu, HostFacts, Unit, Weights
from llmgw.inventory import Host, NodeState
from llmgw.planner import MapFabrics, PlanInputs
from llmgw.planner.fleet import BYTES_PER_GB
from llmgw.site import PortRange
from llmgw.state import State

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def host(name: str, state: NodeState = "ready", labels: Mapping[str, str] | None = None,
         address: str | None = None, model_dirs: Iterable[str] = ("/srv/models",)) -> Host:
    """A node; like the lab's, it keeps operator-provided models in /srv/models (llmgw_model_dirs)."""
    return Host(name=name, groups=frozenset({"llmgw_nodes"}), node_state=state, labels=dict(labels or {}),
                model_dirs=list(model_dirs), mgmt_address=address or name)


def gpus(n: int, cls: str = "H100-80GB", sick: Mapping[int, str] | None = None) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"u{i}", name=cls, gpu_class=cls, problems=[sick[i]] if sick and i in sick else [])
            for i in range(n)]


def facts(name: str, n_gpus: int | None = 8, cls: str = "H100-80GB", *, mem_gb: float | None = 1024,
          disk_free_gb: float | None = None, shared_device: str | None = None, gpu_list: list[Gpu] | None = None,
          weights: Iterable[Weights] = (), units: Iterable[str] | None = None, gathered_at: datetime = T0,
          stale: bool = False) -> HostFacts:
    fs = None
    if disk_free_gb is not None:
        fs = [Filesystem(mount="/srv" if shared_device else "/", device=shared_device or f"/dev/{name}",
                         fstype="nfs" if shared_device else "ext4", shared=shared_device is not None,
                         free_bytes=int(disk_free_gb * BYTES_PER_GB), total_bytes=int(4000 * BYTES_PER_GB),
                         paths=["/var/cache/llmgw"])]
    g = gpu_list if gpu_list is not None else (None if n_gpus is None else gpus(n_gpus, cls))
    return HostFacts(host=name, gathered_at=gathered_at, gpus=g, memory_total_mb=None if mem_gb is None
                     else int(mem_gb * 1024), filesystems=fs, weights=list(weights),
                     units=None if units is None else [Unit(name=u, active_state="active") for u in units],
                     stale_since=gathered_at if stale else None, stale_reason="unreachable" if stale else None)


def model(name: str, *profiles: Mapping[str, Any], min: int = 1, max: int | None = None,
          source: str | None = None, **extra: Any) -> Model:
    scaling: dict[str, Any] = {"min": min}
    if max is not None:
        scaling["max"] = max
    return Model.model_validate({"name": name, "source": source or f"hf://org/{name}/{name}.gguf",
                                 "scaling": scaling, "profiles": list(profiles), **extra})


def gpu_profile(name: str = "gpu", gpus: int = 1, nodes: int = 1, **kw: Any) -> dict[str, Any]:
    return {"name": name, "engine": "vllm", "gpus": gpus, "nodes": nodes, **kw}


def cpu_profile(name: str = "cpu", mem: float = 0, **kw: Any) -> dict[str, Any]:
    return {"name": name, "engine": "llamacpp", "min_memory_gb": mem, **kw}


def catalog(*models: Model) -> Catalog:
    return Catalog([Located(m, "catalog/models.yaml", i + 1, i) for i, m in enumerate(models)])


def inputs(models: Iterable[Model], hosts: Iterable[Host], host_facts: Iterable[HostFacts] = (),
           state: State | None = None, fabrics: MapFabrics | None = None, sizes: Mapping[str, int | None] = (),
           ports: tuple[int, int] = (20000, 20999)) -> PlanInputs:
    return PlanInputs(catalog=catalog(*models), nodes={h.name: h for h in hosts},
                      facts={f.host: f for f in host_facts}, state=state or State(lineage="test"),
                      fabrics=fabrics or MapFabrics(), ports=PortRange(start=ports[0], end=ports[1]),
                      weight_sizes=dict(sizes or {}))
