"""What llmgw knows about one host: the JSON document `llmgw facts` writes per host.

**Unknown is not zero.** Every resource a host may fail to report is optional, and
None means "not known" (the host is old, unconfigured, or did not say), never "none".
An empty list means the host reported and has none.
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from itertools import repeat
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

FACTS_VERSION = 1


class _Model(BaseModel):
    # Built when first validated: a plan or view from the facts memo makes records without
    # validating any (pack_records), so its process need not build their schemas (~0.1 s of
    # imports, with the planner's records).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# Where a device sits (gpu_facts, ib_facts; module_utils/topology.py). Facts are committed with
# the site, so a pull request may change them: every one is bounded and of one shape.
NumaNode = Annotated[int, Field(strict=True, ge=0, le=1023)]
GpuIndex = Annotated[int, Field(ge=0, le=1023)]  # not strict: JSON object keys are strings
PciBusId = Annotated[str, Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]
PciRoot = Annotated[str, Field(pattern=r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")]
# NVML's common-ancestor levels (nvmlGpuTopologyLevel_t), closest first: the same board
# (NVLink/NVSwitch), one PCIe switch, several switches, one host bridge, one NUMA node, and
# across the CPU interconnect.
TopologyLevel = Literal["internal", "single", "multiple", "hostbridge", "node", "system"]
TOPOLOGY_LEVELS: tuple[TopologyLevel, ...] = get_args(TopologyLevel)
StackVersion = Annotated[str, Field(max_length=64, pattern=r"^[0-9A-Za-z][0-9A-Za-z.+~:_-]*$")]


class Gpu(_Model):
    index: int
    uuid: str
    name: str  # as NVML reports it, e.g. "NVIDIA H100 80GB HBM3"
    gpu_class: str  # normalised, e.g. "H100-80GB"
    memory_total_mb: int | None = None
    memory_used_mb: int | None = None
    pci_bus_id: str | None = None  # "0000:3b:00.0", as sysfs spells it
    vbios: str | None = None
    numa_node: NumaNode | None = None  # from sysfs; None: not known (or the kernel's -1)
    pci_root: PciRoot | None = None  # the PCIe root complex it hangs off, e.g. "pci0000:15"
    # GPU index -> NVML's level between the two; None: not reported (older facts, an old driver).
    topology: Annotated[dict[GpuIndex, TopologyLevel], Field(max_length=1024)] | None = None
    nvlink_peers: Annotated[list[GpuIndex], Field(max_length=1024)] | None = None  # None: no NVLink
    # Each problem that keeps this GPU out of placement, as a sentence. Empty = healthy.
    problems: list[str] = Field(default_factory=list)
    # Findings that do not keep it out (an application's Xid, NVLink error counts), as sentences.
    notes: list[str] = Field(default_factory=list)
    # Health checks that could not be read (the kernel log, an NVML query), as sentences: a
    # GPU with no problem and something unknown is of unknown health, not healthy. Facts from
    # before these checks existed have none: their health was what `problems` says.
    unknown: list[str] = Field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """No problem found (its health may still be unknown: see `health`)."""
        return not self.problems

    @property
    def health(self) -> Literal["ok", "problem", "unknown"]:
        return "problem" if self.problems else "unknown" if self.unknown else "ok"


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
    # An operator's model folder: each file under it (relative path) and its size, to check a
    # copy of a whole repository against its pinned file list. None: not a folder, or not reported.
    files: dict[str, int] | None = None


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
    pci_bus_id: PciBusId | None = None  # where it sits, for the adapters nearest a shard's GPUs
    numa_node: NumaNode | None = None
    pci_root: PciRoot | None = None


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
    gpu_driver: str | None = None  # the NVIDIA driver's version, e.g. "570.133.20"
    cuda_version: str | None = None  # the newest CUDA that driver supports, e.g. "12.8"
    gpu_kernel_log: str | None = None  # where Xids were read: "journalctl" | "dmesg"; None: not read
    gpu_notes: list[str] | None = None  # host-wide GPU notes (Xids at addresses NVML does not list...)
    # nvidia-fabricmanager's state (systemd's word) on an NVSwitch system; None: not one, or not known.
    # Anything but "active" there keeps every GPU of the host out (llmgw.gpus).
    fabric_manager: Literal["active", "inactive", "failed", "activating", "deactivating", "reloading",
                            "not installed"] | None = None
    rdma_core: StackVersion | None = None  # rdma-core's package version, from ib_facts
    ofed: StackVersion | None = None  # MLNX_OFED's, where installed
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


# ---- The facts memo's compact form (llmgw.facts.cache) ----------------------------------
#
# A 4,096-host fleet is 82,000 records. Pickled one by one, each is a reduce call, a dict,
# a fields set and four attribute writes in Python, a third of a second to load. Packed
# instead: one flat list of field dicts per record class for the whole fleet (pickle builds
# the dicts, sharing the key strings), a parent's non-empty child list becomes a (start,
# stop) slice of its class's list, and equal strings and times are pickled once. Unpacking
# makes each class's records in a few C-level passes (map), not a Python call per record:
# load and unpack ~0.15 s.

_M = TypeVar("_M", bound=_Model)
# record class name -> (each record's fields, each one's fields set: None when all are set)
_Packed = dict[str, tuple[list[dict[str, Any]], list[frozenset[str] | None] | None]]


def _child_class(annotation: Any) -> type[_Model] | None:
    """X for a field typed list[X] or list[X] | None, X a record; None for any other field."""
    if get_origin(annotation) in (Union, types.UnionType):
        found = [c for c in map(_child_class, get_args(annotation)) if c is not None]
        return found[0] if len(found) == 1 else None
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if isinstance(item, type) and issubclass(item, _Model):
            return item
    return None


def _children(cls: type[_Model]) -> dict[str, type[_Model]]:
    found = {name: _child_class(field.annotation) for name, field in cls.model_fields.items()}
    return {name: child for name, child in found.items() if child is not None}


def _children_first(cls: type[_Model], out: list[type[_Model]]) -> list[type[_Model]]:
    for child in _children(cls).values():
        _children_first(child, out)
    if cls not in out:
        out.append(cls)
    return out


# Every record class in HostFacts, children before parents: unpacking makes a class's
# records once its children exist.
_PACKED_CLASSES = tuple(_children_first(HostFacts, []))
_CHILDREN = {cls: _children(cls) for cls in _PACKED_CLASSES}
# Field names in declaration order, as validation fills __dict__ (pydantic's model_fields is a slow property)
_NAMES = {cls: tuple(cls.model_fields) for cls in _PACKED_CLASSES}


class _Packer:
    def __init__(self) -> None:
        self.lists: dict[type[_Model], list[dict[str, Any]]] = {cls: [] for cls in _PACKED_CLASSES}
        self.fields_sets: dict[type[_Model], list[frozenset[str] | None]] = {cls: [] for cls in _PACKED_CLASSES}
        self.seen: dict[Any, Any] = {}  # one object per equal string, time or fields set

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self.seen.setdefault(value, value)
        if kind is datetime:  # equal times in other zones are ==: the key keeps the zone
            return self.seen.setdefault((value.isoformat(), value.tzinfo, value.fold), value)
        if kind is list:
            return [self.value(item) for item in value]
        if kind is dict:
            return {self.value(k): self.value(v) for k, v in value.items()}
        return value  # numbers, None, and anything else pickled as it is

    def record(self, record: _Model) -> None:
        cls = type(record)
        names, kids, seen, values = _NAMES[cls], _CHILDREN[cls], self.seen, record.__dict__
        fields: dict[str, Any] = {}
        for name in names:
            value = values[name]
            if type(value) is str:  # most values: inline, not a call each
                value = seen.setdefault(value, value)
            elif name in kids and value:  # None and [] stay as they are
                child = self.lists[kids[name]]
                start = len(child)
                for item in value:
                    self.record(item)
                value = (start, len(child))
            elif value is not None and type(value) is not int and type(value) is not bool:
                value = self.value(value)
            fields[name] = value
        self.lists[cls].append(fields)
        fields_set = record.__pydantic_fields_set__
        self.fields_sets[cls].append(None if len(fields_set) == len(names)
                                     else seen.setdefault(frozenset(fields_set), frozenset(fields_set)))


def pack_records(hosts: list[HostFacts]) -> _Packed:
    """`hosts` in the memo's compact form; `unpack_records` makes them again."""
    packer = _Packer()
    for host in hosts:
        packer.record(host)
    return {cls.__name__: (packer.lists[cls], packer.fields_sets[cls] if any(packer.fields_sets[cls]) else None)
            for cls in _PACKED_CLASSES}


_new = object.__new__
_setattr = object.__setattr__


def _make(cls: type[_M], dicts: list[dict[str, Any]], fields_sets: list[frozenset[str] | None] | None) -> list[_M]:
    """Records of `cls` with these fields, as pydantic's validation or __setstate__ leaves them."""
    records: list[_M] = list(map(_new, repeat(cls, len(dicts))))
    # All records with every field set share one set: pydantic copies a fields set before
    # changing it (model_copy), and adding a field name to a set of all of them changes nothing.
    every = set(_NAMES[cls])
    sets: Iterable[set[str]] = repeat(every) if fields_sets is None else \
        [every if s is None else set(s) for s in fields_sets]
    deque(map(_setattr, records, repeat("__dict__"), dicts), 0)
    deque(map(_setattr, records, repeat("__pydantic_fields_set__"), sets), 0)
    deque(map(_setattr, records, repeat("__pydantic_extra__"), repeat(None)), 0)
    deque(map(_setattr, records, repeat("__pydantic_private__"), repeat(None)), 0)
    return records


def unpack_records(packed: _Packed) -> list[HostFacts]:
    """The hosts `pack_records` packed, equal to those it was given."""
    made: dict[type[_Model], list[Any]] = {}
    for cls in _PACKED_CLASSES:  # children first
        dicts, fields_sets = packed[cls.__name__]
        for name, child in _CHILDREN[cls].items():
            children = made[child]
            if not children:  # no spans to fill (e.g. adapters without ports): a pass spared
                continue
            for fields in dicts:
                span = fields[name]
                if type(span) is tuple:
                    fields[name] = children[span[0]:span[1]]
        made[cls] = _make(cls, dicts, fields_sets)
    return made[HostFacts]
