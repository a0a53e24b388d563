"""What llmgw knows about one host: the JSON document `llmgw facts` writes per host.

**Unknown is not zero.** Every resource a host may fail to report is optional, and
None means "not known" (the host is old, unconfigured, or did not say), never "none".
An empty list means the host reported and has none.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FACTS_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by the facts memo (llmgw.facts.memo): 80,000 records at 4,096 hosts. Rebuilt
        # from their fields without pydantic's __setstate__ and its state dict per record, a
        # sixth less to load. No extra fields (forbidden) and no private attributes to carry.
        return (_rebuild, (type(self), self.__dict__, self.__pydantic_fields_set__))


_setattr = object.__setattr__


def _rebuild(cls: type[_Model], fields: dict[str, Any], fields_set: set[str]) -> _Model:
    """A record as it was pickled (`_Model.__reduce__`): what pydantic's __setstate__ sets."""
    record = cls.__new__(cls)
    _setattr(record, "__dict__", fields)
    _setattr(record, "__pydantic_fields_set__", fields_set)
    _setattr(record, "__pydantic_extra__", None)
    _setattr(record, "__pydantic_private__", None)
    return record


class Gpu(_Model):
    index: int
    uuid: str
    name: str  # as NVML reports it, e.g. "NVIDIA H100 80GB HBM3"
    gpu_class: str  # normalised, e.g. "H100-80GB"
    memory_total_mb: int | None = None
    memory_used_mb: int | None = None
    # Each problem that keeps this GPU out of placement, as a sentence. Empty = healthy.
    problems: list[str] = Field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


class Filesystem(_Model):
    """One filesystem holding model dirs or the cache dir; counted once however many dirs."""

    mount: str
    device: str
    fstype: str
    shared: bool  # NFS, Lustre, GPFS, BeeGFS, CephFS, CIFS, FUSE filers
    free_bytes: int
    total_bytes: int
    paths: list[str]  # the configured dirs that live on it


class Weights(_Model):
    """A model file (or folder) present on the host."""

    path: str
    size_bytes: int
    # True for llmgw's own cache entries (named by a hash of the source); False for
    # files an operator put there, which llmgw never removes.
    cache: bool
    cache_name: str | None = None  # the hash name, for cache entries


class Unit(_Model):
    name: str  # e.g. "llmgw-shard@qwen-7b-0-0.service"
    active_state: str  # active | inactive | failed | activating | ...
    sub_state: str = ""
    # LLMGW_LINEAGE in the unit's environment: the state that made it. None: not reported
    # (facts or a unit from before lineages were recorded).
    lineage: str | None = None
    # A shard's GPU indices (CUDA_VISIBLE_DEVICES) and the memory it uses now (MiB), for
    # keeping another lineage's plans off them. None: not known (or no GPUs given).
    gpus: list[int] | None = None
    memory_mb: int | None = None


class IbPort(_Model):
    port: int
    state: str  # e.g. "ACTIVE", "DOWN"
    rate: str | None = None  # e.g. "200 Gb/sec (4X HDR)"
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    port_guid: str | None = None


class IbAdapter(_Model):
    name: str  # e.g. "mlx5_0"
    node_guid: str | None = None  # "0x" + 16 hex digits
    node_desc: str | None = None  # e.g. "gpu-node-01 mlx5_0", as ibnetdiscover prints it
    ports: list[IbPort] = Field(default_factory=list)


class HostFacts(_Model):
    """Everything gathered from one host. None = not known."""

    version: Literal[1] = 1
    host: str
    gathered_at: datetime
    # Set when the last gathering could not reach the host: these are the last good
    # facts, kept so planning still knows the host, and `stale_since` says since when.
    stale_since: datetime | None = None
    stale_reason: str | None = None

    cpus: int | None = None
    memory_total_mb: int | None = None
    gpus: list[Gpu] | None = None
    gpus_unknown_reason: str | None = None  # why `gpus` is None ("no NVIDIA driver", ...)
    filesystems: list[Filesystem] | None = None
    weights: list[Weights] | None = None
    units: list[Unit] | None = None
    units_unknown_reason: str | None = None  # why `units` is None ("no systemd", ...)
    engines: dict[str, str] | None = None  # engine -> version
    ib_adapters: list[IbAdapter] | None = None
    # Raw `ibnetdiscover` text when this host was asked for it (one host per fabric);
    # parsed on the control side by llmgw.fabric.
    # Several fabrics seen from one host: several complete topology files, joined.
    ibnetdiscover: str | None = None
    ibnetdiscover_reason: str | None = None  # why it is None or partial, when it was asked for

    @property
    def stale(self) -> bool:
        return self.stale_since is not None

    def healthy_gpus(self) -> list[Gpu] | None:
        return None if self.gpus is None else [g for g in self.gpus if g.healthy]
