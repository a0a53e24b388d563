"""The plan's schema: what `llmgw plan` writes and `llmgw apply` (and scripts) read.

This module is the contract; the reconciler (`reconcile.py`) makes plans, apply consumes them.
`PLAN_VERSION` is written into every plan and checked when one is loaded (`load_plan`), so an
apply never acts on a plan written by an incompatible llmgw. Every action and every replica not
moved carries a machine-readable `code` beside its prose `reason`: scripts match the code, people
read the reason.

Why long: the contract is one file on purpose, and a saved plan is hostile input, so each record
carries its own checks (every string that reaches a unit, a path or a URL) beside its fields.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmgw import collector
from llmgw.catalog.schema import Engine, EnvName, Name, Text
from llmgw.errors import PlanError
from llmgw.hostnames import is_host_name
from llmgw.state import AdapterPath, LoadedAdapter, ModelRecord, Replica, Shard, State
from llmgw.state import replica_sort_key as replica_sort_key  # the ids' order, kept with their shape
from llmgw.state.model import (
    Count,
    GpuIndex,
    HostName,
    Line,
    Lineage,
    Port,
    Prose,
    Rank,
    ReplicaId,
    SpecHash,
    UnitName,
    check_shards,
    endpoint_host,
    problems,
)
from llmgw.state.model import Source as SourceUrl
from llmgw.weights.names import cache_name, is_cache_name
from llmgw.weights.present import is_model_path
from llmgw.yamlio import json_text

PLAN_VERSION: Literal[1] = 1

# Why an action is planned. The prose `reason` says the same with names and numbers filled in.
ReasonCode = Literal[
    "scaling_min",          # create: fewer than scaling.min replicas run
    "node_gone",            # replace: a shard's node left the inventory
    "units_gone",           # replace: the facts show a shard's units gone from its host
    "node_draining",        # replace: a shard's node is draining
    "node_lost",            # replace: a shard's node stopped answering for lost_after (llmgw.nodetime)
    "profile_removed",      # replace: the replica's profile left the catalog
    "definition_changed",   # replace: source or profile changed (spec hash)
    "was_draining",         # destroy: it was being drained when the last apply stopped
    "was_starting",         # destroy: it was being started when the last apply stopped
    "model_removed",        # destroy: its model left the catalog
    "scaling_max",          # destroy: more than scaling.max replicas
    "no_replacement",       # destroy: replacing it was needed, nothing can take it, nothing runs there
    "drain_deadline",       # destroy: its node's drain deadline passed and nothing can take it
    "stray",                # destroy: units the state never recorded (drift)
    "idle",                 # destroy: an on-demand replica idle for its idle_timeout on every router
    "demand",               # create/destroy: the controller starts or drains one on load (controller/demand.py)
    "model_new",            # update: new in the catalog
    "model_changed",        # update: aliases, fallbacks or scaling changed
    "model_gone",           # update: no longer in the catalog
]
REASON_CODES: tuple[str, ...] = get_args(ReasonCode)

class _Model(BaseModel):
    # Built when first validated or dumped: `llmgw plan` makes its records from validated
    # values (_trusted) and writes its JSON in one walk, so it need not build their schemas.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


_M = TypeVar("_M", bound=BaseModel)


def _trusted(cls: type[_M], fields: dict[str, Any]) -> _M:
    """A record of `fields` (every field of `cls`, in its order) without validating them again:
    what pydantic's model_construct does, minus its per-field alias and default look-ups. Only for
    values the planner made from validated records (the replicas it places: 10,000 at 4,096 hosts,
    where validating each shard and replica again was a tenth of placing them)."""
    record = cls.__new__(cls)
    object.__setattr__(record, "__dict__", fields)
    object.__setattr__(record, "__pydantic_fields_set__", set(fields))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


# Every value of a plan is checked when a plan is read back (load_plan), with the state's types
# (llmgw.state.model): a saved plan is a file anyone with write access to it could have edited,
# and its values reach unit files, host paths and the URLs routers send engine keys to.
Address = Annotated[str, Field(max_length=253)]  # a host name or IP; empty only for a node gone from the inventory
CacheName = Annotated[str, Field(max_length=200)]  # _cache_entry(source), checked in PlannedReplica
Digest = Annotated[str, Field(pattern=r"^(?:[0-9a-f]{64})?$")]
_cache_entry = lru_cache(maxsize=4096)(cache_name)  # weights.names.cache_name, per source: replicas share a few


GpuUuid = Annotated[str, Field(pattern=r"^(?:GPU|MIG)-[0-9A-Za-z-]{1,90}$")]
HcaName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,64}(?::[0-9]{1,3})?$")]  # NCCL_IB_HCA's `mlx5_0:1`


class ShardTopology(_Model):
    """Where on its host a shard's GPUs sit and what goes with them (llmgw.planner.topology):
    shown in the plan, and carried into the unit by apply."""

    # The closest level every two of its GPUs share ("NVLink", "one NUMA node"...); None: not known.
    level: Line | None = None
    numa_node: Annotated[int, Field(strict=True, ge=0, le=1023)] | None = None  # the one they share
    numa_bind: bool = False  # the unit binds CPUs and memory to numa_node (profile `numa: bind`)
    gpu_uuids: Annotated[list[GpuUuid], Field(max_length=64)] = Field(default_factory=list)  # by index order
    ib_hcas: Annotated[list[HcaName], Field(max_length=64)] | None = None  # NCCL_IB_HCA; None: no fabric
    ib_why: Line | None = None  # why those adapters

    @classmethod
    def trusted(cls, level: str | None, numa_node: int | None, numa_bind: bool, gpu_uuids: list[str],
                ib_hcas: list[str] | None, ib_why: str | None) -> ShardTopology:
        """From the planner's own values, made from validated facts (see `_trusted`)."""
        return _trusted(cls, {"level": level, "numa_node": numa_node, "numa_bind": numa_bind,
                              "gpu_uuids": gpu_uuids, "ib_hcas": ib_hcas, "ib_why": ib_why})

    @model_validator(mode="after")
    def _bind(self) -> ShardTopology:
        if self.numa_bind and self.numa_node is None:
            raise ValueError("numa_bind is set but the shard's GPUs share no numa_node")
        return self


class PlannedShard(_Model):
    node: HostName
    rank: Rank
    gpus: list[GpuIndex] = Field(default_factory=list)
    port: Port
    unit: UnitName
    address: Address  # the node's management address, where routers and other ranks reach it
    # An operator's copy of the weights on this node, served in place (llmgw.weights.present):
    # apply fetches nothing for this shard and gives the engine this path. None: the cache entry.
    present_at: Annotated[str, Field(max_length=4096)] | None = None
    # Where its GPUs sit and what goes with them; None: nothing known beyond the indices.
    topology: ShardTopology | None = None

    @model_validator(mode="after")
    def _address(self) -> PlannedShard:
        if self.address and not is_host_name(self.address):
            raise ValueError(f"address {self.address!r} is not a host name or an IP address")
        if self.present_at is not None and not is_model_path(self.present_at):
            raise ValueError(f"present_at {self.present_at!r} is not an absolute path of letters, digits and "
                             "._+- without '.' or '..' parts")
        if self.topology is not None and self.topology.gpu_uuids and len(self.topology.gpu_uuids) != len(self.gpus):
            raise ValueError(f"topology.gpu_uuids names {len(self.topology.gpu_uuids)} GPUs, the shard has "
                             f"{len(self.gpus)}; make a new plan")
        return self

    @classmethod
    def placed(cls, node: str, rank: int, gpus: list[int], port: int, unit: str, address: str,
               present_at: str | None = None, topology: ShardTopology | None = None) -> PlannedShard:
        """A new shard from the planner's own, already valid values (see `_trusted`)."""
        return _trusted(cls, {"node": node, "rank": rank, "gpus": gpus, "port": port, "unit": unit,
                              "address": address, "present_at": present_at, "topology": topology})


class PlannedAdapter(_Model):
    """A LoRA adapter a new replica's engine loads at start (docs/adapters.md): fetched beside
    the base's weights into the same cache, its entry named after its source."""

    name: Name
    source: SourceUrl
    cache_name: CacheName
    # Its LoRA rank where `catalog validate` read it (adapter_config.json `r`); None: not known,
    # the engine's default applies. vLLM's --max-lora-rank is derived from it (llmgw.engines.vllm).
    rank: Annotated[int, Field(ge=1)] | None = None
    # Its model's `adapter_loading: runtime`: where apply fetches it on rank 0's host, the path the
    # router sends the engine's load call (router/lora.py). None: the engine loads it at start.
    path: AdapterPath | None = None

    @model_validator(mode="after")
    def _entry(self) -> PlannedAdapter:
        if self.cache_name != _cache_entry(self.source):
            raise ValueError(f"adapter {self.name}: cache_name {self.cache_name!r} is not the cache entry of its "
                             f"source ({_cache_entry(self.source)})")
        if self.path is not None and self.path.rsplit("/", 1)[-1] != self.cache_name:
            raise ValueError(f"adapter {self.name}: path {self.path!r} is not its cache entry {self.cache_name}")
        return self


class PlannedReplica(_Model):
    id: ReplicaId
    model: Name
    profile: Name
    engine: Engine
    shards: Annotated[list[PlannedShard], Field(min_length=1)]
    endpoint: str
    spec_hash: SpecHash
    status: Literal["new", "kept"]
    fabric: Line | None = None  # the fabric joining a multi-node replica's shards
    # What apply needs to make a new replica (None on kept ones: apply leaves them alone).
    source: SourceUrl | None = None
    cache_name: CacheName | None = None
    args: list[Text] | None = None
    env: dict[EnvName, Text] | None = None
    # The profile's key: the engine runs the model's own code. True or None (never False), so a
    # plan without it reads as before the key existed.
    trust_remote_code: bool | None = None
    # New replicas only: the LoRA adapters its engine loads, in catalog order (None: none).
    adapters: list[PlannedAdapter] | None = None
    # New replicas of an `adapter_loading: runtime` model: the adapters its engine holds at once
    # (vLLM's --max-loras); it starts with none of them. None: all loaded at start.
    max_loras: Annotated[int, Field(ge=1, le=256)] | None = None

    @model_validator(mode="after")
    def _formed_by_llmgw(self) -> PlannedReplica:
        # Derived values must be what the planner derives: units from the id and rank, the
        # endpoint from rank 0's address and port (a kept replica keeps the state's endpoint,
        # checked against the inventory when the state was read: planner.load.check_endpoints),
        # the cache entry from the source.
        check_shards(self.id, [(s.rank, s.unit) for s in self.shards])
        first = next(s for s in self.shards if s.rank == 0)
        host = endpoint_host(self.endpoint, first.port)
        if self.status == "new" and host != first.address:
            raise ValueError(f"endpoint {self.endpoint!r} is not on rank 0's node {first.node} "
                             f"(address {first.address})")
        if self.status == "new" and any(v is None for v in (self.source, self.cache_name, self.args, self.env)):
            raise ValueError("a new replica needs its source, cache_name, args and env")
        if self.cache_name is not None and (
                self.source is None or not is_cache_name(self.cache_name)
                or self.cache_name != _cache_entry(self.source)):
            raise ValueError(f"cache_name {self.cache_name!r} is not the cache entry of its source "
                             f"({_cache_entry(self.source) if self.source else 'none given'})")
        return self

    @classmethod
    def placed(cls, id: str, model: str, profile: str, engine: str, shards: list[PlannedShard],
               endpoint: str, spec_hash: str, fabric: str | None, source: str, cache_name: str, args: list[str],
               env: dict[str, str], trust_remote_code: bool | None = None,
               adapters: list[PlannedAdapter] | None = None, max_loras: int | None = None) -> PlannedReplica:
        """A new replica from the planner's own, already valid values (see `_trusted`)."""
        return _trusted(cls, {"id": id, "model": model, "profile": profile, "engine": engine, "shards": shards,
                              "endpoint": endpoint, "spec_hash": spec_hash, "status": "new", "fabric": fabric,
                              "source": source, "cache_name": cache_name, "args": args, "env": env,
                              "trust_remote_code": trust_remote_code, "adapters": adapters,
                              "max_loras": max_loras})

    @classmethod
    def kept(cls, id: str, model: str, profile: str, engine: str, shards: list[PlannedShard], endpoint: str,
             spec_hash: str, fabric: str | None) -> PlannedReplica:
        """A replica kept where it runs, from the state's validated record (see `_trusted`): what
        every re-plan of an unchanged fleet makes for each replica."""
        return _trusted(cls, {"id": id, "model": model, "profile": profile, "engine": engine, "shards": shards,
                              "endpoint": endpoint, "spec_hash": spec_hash, "status": "kept", "fabric": fabric,
                              "source": None, "cache_name": None, "args": None, "env": None,
                              "trust_remote_code": None, "adapters": None, "max_loras": None})


def loaded_adapters(r: PlannedReplica) -> list[LoadedAdapter]:
    """What the state records of a new replica's adapters once its engine runs."""
    return [LoadedAdapter(name=a.name, cache_name=a.cache_name, path=a.path) for a in r.adapters or []]


class UnitRef(_Model):
    node: HostName
    unit: UnitName


class Action(_Model):
    action: Literal["create", "replace", "destroy", "update"]
    replica: ReplicaId | None  # None for `update` (a model's record for the routers)
    model: Name
    code: ReasonCode
    reason: Prose
    replaces: ReplicaId | None = None  # for `replace`: the replica destroyed once the new one serves
    units: list[UnitRef] = Field(default_factory=list)  # for `destroy`: what to stop and remove
    stray: bool = False  # a `destroy` of units the state never recorded (drift)
    # For `destroy` and `replace`: lost nodes of the replica going away; apply drops its units
    # there from the state without contacting those hosts (they stopped answering).
    unreached: list[HostName] = Field(default_factory=list)


class Rejection(_Model):
    profile: Name
    node: HostName | None
    fabric: Line | None = None
    reason: Prose


class NotMoved(_Model):
    replica: ReplicaId
    code: ReasonCode  # why it had to move
    reason: Prose


class Unplaced(_Model):
    model: Name
    wanted: Count
    placed: Count
    rejections: list[Rejection] = Field(default_factory=list)
    not_moved: list[NotMoved] = Field(default_factory=list)


class OnDemand(_Model):
    model: Name
    max: Count
    idle_timeout: Count
    running: Count


class Desired(_Model):
    replicas: list[PlannedReplica] = Field(default_factory=list)
    models: list[ModelRecord] = Field(default_factory=list)

    @classmethod
    def placed(cls, replicas: list[PlannedReplica], models: list[ModelRecord]) -> Desired:
        """The planner's own replicas (see `_trusted`): pydantic runs an instance's after-validators
        again in a list it validates, a quarter of re-planning an unchanged 10,000-replica fleet."""
        return _trusted(cls, {"replicas": replicas, "models": models})


class Summary(_Model):
    add: Count = 0
    change: Count = 0
    destroy: Count = 0


class Plan(_Model):
    version: Literal[1] = PLAN_VERSION
    state_serial: Annotated[int, Field(ge=0)]
    state_lineage: Lineage
    # A digest of what the plan was made from (llmgw.planner.load.inputs_digest): `apply PLAN`
    # makes the plan again and names this when the two differ. Empty: made without a site.
    inputs_digest: Digest = ""
    summary: Summary
    actions: list[Action] = Field(default_factory=list)
    desired: Desired
    unplaced: list[Unplaced] = Field(default_factory=list)
    on_demand: list[OnDemand] = Field(default_factory=list)
    notes: list[Prose] = Field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.actions)

    def digest(self) -> str:
        """SHA-256 of the plan's JSON: what the state's history records a write was made from."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def to_json(self) -> str:
        with collector.paused():  # a plan of 10,000 replicas is ~1M small objects
            try:
                ordered = _ordered(self)
            except _NotPlain:
                return json_text(self.model_dump(mode="json"))
            return json_text(ordered, presorted=True)

    def applied(self, state: State) -> State:
        """The state this plan leaves once applied in full (apply writes it step by step)."""
        old = {r.id: r for r in state.replicas}
        replicas = []
        for r in self.desired.replicas:
            prev = old.get(r.id)
            replicas.append(Replica(
                id=r.id, model=r.model, profile=r.profile, engine=r.engine,
                state=prev.state if prev else "ready", endpoint=r.endpoint,
                shards=[Shard(node=s.node, rank=s.rank, gpus=s.gpus, port=s.port, unit=s.unit) for s in r.shards],
                created_at=prev.created_at if prev else None, spec_hash=r.spec_hash,
                cache_name=r.cache_name or (prev.cache_name if prev else None),
                source=r.source or (prev.source if prev else None),
                adapters=loaded_adapters(r) if r.status == "new" else (prev.adapters if prev else [])))
        return state.model_copy(update={"replicas": replicas, "models": list(self.desired.models)})


class _NotPlain(Exception):
    """A value `_ordered` leaves to pydantic's own dump."""


_SCALARS = frozenset((str, int, bool, type(None)))
_FIELD_ORDER: dict[type, tuple[str, ...]] = {}  # per record class: its fields, sorted


def _ordered(value: Any) -> Any:
    """`value.model_dump(mode="json")` with every object's keys sorted, in one walk over the records:
    dumping a 10,000-replica plan and then sorting each of its ~50,000 objects was a third of
    writing it. Records hold only strings, integers, booleans, None, lists, string-keyed dicts
    and records; anything else raises _NotPlain (the caller then dumps the usual way)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [v if type(v) in _SCALARS else _ordered(v) for v in value]
    order = _FIELD_ORDER.get(kind)
    if order is not None:
        fields = value.__dict__
        return {k: v if type(v) in _SCALARS else _ordered(v) for k in order for v in (fields[k],)}
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise _NotPlain
        return {k: v if type(v) in _SCALARS else _ordered(v) for k in sorted(value) for v in (value[k],)}
    if isinstance(value, BaseModel) and not value.__pydantic_extra__ and _dumps_plainly(kind):
        _FIELD_ORDER[kind] = tuple(sorted(kind.model_fields))
        return _ordered(value)
    raise _NotPlain


def _dumps_plainly(kind: type[BaseModel]) -> bool:
    """Whether pydantic dumps a record of this class as its fields by name, nothing added or left out."""
    decorators = kind.__pydantic_decorators__
    return not (kind.model_computed_fields or decorators.field_serializers or decorators.model_serializers
                or any(f.alias or f.serialization_alias or f.exclude
                       or any("Serializer" in type(m).__name__ for m in f.metadata)
                       for f in kind.model_fields.values()))


def load_plan(text: str | bytes, where: str) -> Plan:
    """A plan read back from JSON, refusing other versions by name rather than by a schema error."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"{where} is not a llmgw plan: not JSON ({exc})",
                        hint="save a plan with `llmgw plan --out FILE`") from None
    if not isinstance(raw, dict) or "version" not in raw:
        raise PlanError(f"{where} is not a llmgw plan: no `version`",
                        hint="save a plan with `llmgw plan --out FILE`")
    version = raw["version"]
    if version != PLAN_VERSION:
        raise PlanError(f"{where} is a plan of version {version!r}; this llmgw reads version {PLAN_VERSION}",
                        hint="make the plan again with this llmgw (`llmgw plan --out FILE`)")
    try:
        return Plan.model_validate(raw)
    except ValidationError as exc:
        found = problems(exc, where)
        raise PlanError(f"{where} is not a llmgw plan: {found[0].removeprefix(where + ': ')}", detail=found[1:],
                        hint="llmgw writes plans and never reads a hand-edited one: make it again with "
                             "`llmgw plan --out FILE`") from None
