"""The plan's schema: what `llmgw plan` writes and `llmgw apply` (and scripts) read.

This module is the contract; the reconciler (`reconcile.py`) makes plans, apply consumes them.
`PLAN_VERSION` is written into every plan and checked when one is loaded (`load_plan`), so an
apply never acts on a plan written by an incompatible llmgw. Every action and every replica not
moved carries a machine-readable `code` beside its prose `reason`: scripts match the code, people
read the reason.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmgw import collector
from llmgw.errors import PlanError
from llmgw.planner.spec import replica_number
from llmgw.state import ModelRecord, Replica, Shard, State
from llmgw.yamlio import json_text

PLAN_VERSION: Literal[1] = 1

# Why an action is planned. The prose `reason` says the same with names and numbers filled in.
ReasonCode = Literal[
    "scaling_min",          # create: fewer than scaling.min replicas run
    "node_gone",            # replace: a shard's node left the inventory
    "units_gone",           # replace: the facts show a shard's units gone from its host
    "node_draining",        # replace: a shard's node is draining
    "profile_removed",      # replace: the replica's profile left the catalog
    "definition_changed",   # replace: source or profile changed (spec hash)
    "was_draining",         # destroy: it was being drained when the last apply stopped
    "was_starting",         # destroy: it was being started when the last apply stopped
    "model_removed",        # destroy: its model left the catalog
    "scaling_max",          # destroy: more than scaling.max replicas
    "no_replacement",       # destroy: replacing it was needed, nothing can take it, nothing runs there
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


class PlannedShard(_Model):
    node: str
    rank: int
    gpus: list[int] = Field(default_factory=list)
    port: int
    unit: str
    address: str  # the node's management address, where routers and other ranks reach it

    @classmethod
    def placed(cls, node: str, rank: int, gpus: list[int], port: int, unit: str, address: str) -> PlannedShard:
        """A new shard from the planner's own, already valid values (see `_trusted`)."""
        return _trusted(cls, {"node": node, "rank": rank, "gpus": gpus, "port": port, "unit": unit,
                              "address": address})


class PlannedReplica(_Model):
    id: str
    model: str
    profile: str
    engine: str
    shards: list[PlannedShard]
    endpoint: str
    spec_hash: str
    status: Literal["new", "kept"]
    fabric: str | None = None  # the fabric joining a multi-node replica's shards
    # What apply needs to make a new replica (None on kept ones: apply leaves them alone).
    source: str | None = None
    cache_name: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    # The profile's key: the engine runs the model's own code. True or None (never False), so a
    # plan without it reads as before the key existed.
    trust_remote_code: bool | None = None

    @classmethod
    def placed(cls, id: str, model: str, profile: str, engine: str, shards: list[PlannedShard],
               endpoint: str, spec_hash: str, fabric: str | None, source: str, cache_name: str, args: list[str],
               env: dict[str, str], trust_remote_code: bool | None = None) -> PlannedReplica:
        """A new replica from the planner's own, already valid values (see `_trusted`)."""
        return _trusted(cls, {"id": id, "model": model, "profile": profile, "engine": engine, "shards": shards,
                              "endpoint": endpoint, "spec_hash": spec_hash, "status": "new", "fabric": fabric,
                              "source": source, "cache_name": cache_name, "args": args, "env": env,
                              "trust_remote_code": trust_remote_code})

    @classmethod
    def kept(cls, id: str, model: str, profile: str, engine: str, shards: list[PlannedShard], endpoint: str,
             spec_hash: str, fabric: str | None) -> PlannedReplica:
        """A replica kept where it runs, from the state's validated record (see `_trusted`): what
        every re-plan of an unchanged fleet makes for each replica."""
        return _trusted(cls, {"id": id, "model": model, "profile": profile, "engine": engine, "shards": shards,
                              "endpoint": endpoint, "spec_hash": spec_hash, "status": "kept", "fabric": fabric,
                              "source": None, "cache_name": None, "args": None, "env": None,
                              "trust_remote_code": None})


class UnitRef(_Model):
    node: str
    unit: str


class Action(_Model):
    action: Literal["create", "replace", "destroy", "update"]
    replica: str | None  # None for `update` (a model's record for the routers)
    model: str
    code: ReasonCode
    reason: str
    replaces: str | None = None  # for `replace`: the replica destroyed once the new one serves
    units: list[UnitRef] = Field(default_factory=list)  # for `destroy`: what to stop and remove
    stray: bool = False  # a `destroy` of units the state never recorded (drift)


class Rejection(_Model):
    profile: str
    node: str | None
    fabric: str | None = None
    reason: str


class NotMoved(_Model):
    replica: str
    code: ReasonCode  # why it had to move
    reason: str


class Unplaced(_Model):
    model: str
    wanted: int
    placed: int
    rejections: list[Rejection] = Field(default_factory=list)
    not_moved: list[NotMoved] = Field(default_factory=list)


class OnDemand(_Model):
    model: str
    max: int
    idle_timeout: int
    running: int


class Desired(_Model):
    replicas: list[PlannedReplica] = Field(default_factory=list)
    models: list[ModelRecord] = Field(default_factory=list)


class Summary(_Model):
    add: int = 0
    change: int = 0
    destroy: int = 0


class Plan(_Model):
    version: Literal[1] = PLAN_VERSION
    state_serial: int
    state_lineage: str
    summary: Summary
    actions: list[Action] = Field(default_factory=list)
    desired: Desired
    unplaced: list[Unplaced] = Field(default_factory=list)
    on_demand: list[OnDemand] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.actions)

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
                source=r.source or (prev.source if prev else None)))
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


def replica_sort_key(replica_id: str, model: str) -> tuple[str, int, str]:
    n = replica_number(replica_id, model)
    return (model, n if n is not None else 1 << 30, replica_id)


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
        raise PlanError(f"{where} is not a llmgw plan: {str(exc).splitlines()[0]}",
                        hint="save a plan with `llmgw plan --out FILE`") from None
