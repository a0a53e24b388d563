"""The applied state's schema: the record of what runs where, and the router's only input.

Schema version 1 (pinned; README "State file" documents it):

    {"version": 1, "serial": 7, "lineage": "<uuid>",
     "models":   [{"name", "aliases", "fallbacks", "scaling": {"min", "max", "idle_timeout"},
                   "routing": "least-load|prefix-affinity",
                   "route": null | {"targets": [{"model", "weight"}], "guard": null | {...}}}],
     "replicas": [{"id", "model", "profile", "engine", "state": "starting|ready|draining",
                   "endpoint": "http://host:port", "created_at",
                   "shards": [{"node", "rank", "gpus", "port", "unit"}]}]}

A backend (llmgw.state.local, llmgw.state.postgres) writes it under a lock, and `serial`
grows by one on every write, so a plan made against serial N is refused once the
state has moved on.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmgw.catalog import Model
from llmgw.catalog.schema import NAME_RE, Engine, Name, check_text
from llmgw.engines import is_host_path
from llmgw.errors import StateError
from llmgw.hostnames import is_host_name

STATE_VERSION = 1
ReplicaState = Literal["starting", "ready", "draining"]

# What a plan or a state may hold. Both are files (or rows) that llmgw reads back, and their
# values reach unit files, paths on hosts and URLs the routers send keys to, so they are
# checked on load like the catalog (SECURITY.md): names by the catalog's own patterns, hosts
# as inventory host names, units and endpoints as llmgw forms them (below), free text as one
# bounded line. The plan's schema (llmgw.planner.schema) uses the same types.
_NAME_BODY = NAME_RE.removeprefix("^").removesuffix("$")
# The planner makes replica ids `<model>-<n>` (planner.reconcile) and facts recognise llmgw's
# units by that shape (UNIT_RE, planner.spec.parse_unit); what a plan or a state may hold is
# a catalog name, `-<n>` or not, and its units `llmgw-<replica id>-<rank>.service`.
_REPLICA_BODY = rf"{_NAME_BODY}(?:-[0-9]{{1,9}})?"
REPLICA_ID_RE = rf"^{_REPLICA_BODY}$"
UNIT_NAME_RE = rf"^llmgw-{_REPLICA_BODY}-[0-9]{{1,4}}\.service$"
UNIT_RE = re.compile(rf"^llmgw-(?P<replica>{_NAME_BODY}-[0-9]{{1,9}})-(?P<rank>[0-9]{{1,4}})\.service$")
LINEAGE_RE = r"^[A-Za-z0-9._-]{0,64}$"  # a uuid4 (llmgw makes them); empty: none yet
SPEC_HASH_RE = r"^(?:[0-9a-f]{16})?$"  # planner.spec.spec_hash; empty: made before hashes were kept
# One file name in a host's weights cache: no `/`, no leading dot (so never `..`). The plan holds
# exactly `weights.names.cache_name(source)`; this is what the state's copy must at least be.
CACHE_FILE_RE = r"^[0-9A-Za-z][0-9A-Za-z._-]{0,127}$"
_ENDPOINT = re.compile(r"^http://(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\[\]/:@?#]+)):(?P<port>[0-9]{1,5})$")
LINE_MAX = 256  # a fabric id, a profile's label...: one short line
PROSE_MAX = 65536  # a reason or a note, which may list many nodes


def _host_name(value: str) -> str:
    if not is_host_name(value):
        raise ValueError(f"{value!r} is not a host name or an IP address (as the inventory names hosts)")
    return value


@lru_cache(maxsize=4096)  # a fleet's replicas share a few hundred sources at most
def _source(value: str) -> str:
    # The catalog's own rule for a source (Model's validator), so a plan or a state can name only
    # what a catalog could.
    return str(Model._known_scheme(check_text(value)))


def _adapter_path(value: str) -> str:
    """An adapter's weights on a host (for the router's load call): the rule the engine role's
    entry check applies to the adapter paths of a unit (llmgw.engines.entry)."""
    if not is_host_path(value):
        raise ValueError(f"{value!r} is not an absolute path without '.' or '..' parts: the file was edited, "
                         "make it again")
    return value


def _prose(value: str) -> str:
    m = re.search(r"[\x00-\x1f\x7f]", value)
    if m:
        raise ValueError(f"contains the control character {m.group()!r}; llmgw writes one line of printable text "
                         "here: the file was edited, make it again")
    return value


ReplicaId = Annotated[str, Field(pattern=REPLICA_ID_RE)]
UnitName = Annotated[str, Field(pattern=UNIT_NAME_RE)]
HostName = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_host_name)]
Lineage = Annotated[str, Field(pattern=LINEAGE_RE)]
SpecHash = Annotated[str, Field(pattern=SPEC_HASH_RE)]
CacheFile = Annotated[str, Field(pattern=CACHE_FILE_RE)]
Source = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_source)]
Line = Annotated[str, Field(max_length=LINE_MAX), AfterValidator(check_text)]
Prose = Annotated[str, Field(max_length=PROSE_MAX), AfterValidator(_prose)]
AdapterPath = Annotated[str, Field(max_length=4096), AfterValidator(_adapter_path)]
Port = Annotated[int, Field(ge=1, le=65535)]
Rank = Annotated[int, Field(ge=0, le=1023)]  # a profile spans at most 1,024 nodes
GpuIndex = Annotated[int, Field(ge=0, le=1023)]
Count = Annotated[int, Field(ge=0, le=10_000_000)]


def unit_name(replica_id: str, rank: int) -> str:
    """The systemd unit of one shard: `llmgw-<replica-id>-<rank>.service`."""
    return f"llmgw-{replica_id}-{rank}.service"


def replica_number(replica_id: str, model: str) -> int | None:
    """n of `<model>-<n>`, or None when the id was not made that way."""
    prefix = model + "-"
    tail = replica_id[len(prefix):] if replica_id.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def replica_sort_key(replica_id: str, model: str) -> tuple[str, int, str]:
    """The plan's and the views' order of replicas: by model, then replica number. Here, with
    the ids' shape, so the router's views sort as the planner does without importing it."""
    n = replica_number(replica_id, model)
    return (model, n if n is not None else 1 << 30, replica_id)


def endpoint_url(address: str, port: int) -> str:
    """Where routers reach a replica: its rank-0 shard's node address and port."""
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"http://{host}:{port}"


def endpoint_host(endpoint: str, port: int) -> str:
    """The address in an endpoint `http://ADDRESS:PORT`, checked to be formed as llmgw forms it
    (`endpoint_url`) with the rank-0 shard's `port`; a ValueError says what is wrong."""
    m = _ENDPOINT.match(endpoint)
    address = (m.group("v6") or m.group("host")) if m else None
    if m is None or address is None or not is_host_name(address) or endpoint_url(address, port) != endpoint:
        raise ValueError(f"endpoint {endpoint!r} is not http://ADDRESS:{port}, the address and port of the "
                         "replica's rank-0 shard")
    return address


def check_shards(replica_id: str, shards: Sequence[tuple[int, str]]) -> None:
    """A replica's shards as (rank, unit): ranks 0..n-1 once each, units named after the replica and rank."""
    ranks = sorted(rank for rank, _ in shards)
    if ranks != list(range(len(shards))):
        raise ValueError(f"shard ranks are {ranks}; a replica's shards are ranks 0 to {len(shards) - 1}, once each")
    for rank, unit in shards:
        if unit != unit_name(replica_id, rank):
            raise ValueError(f"shard {rank}'s unit is {unit!r}; llmgw names it {unit_name(replica_id, rank)}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScalingRecord(_Model):
    min: Annotated[int, Field(ge=0, le=10_000)]
    max: Annotated[int, Field(ge=0, le=10_000)]
    idle_timeout: Annotated[int, Field(ge=0)]  # seconds


# How a router picks among a model's replicas (llmgw/router/balance.py); the catalog's
# `routing:` key (catalog/schema.py's Routing, checked equal by tests/router/test_balance.py).
Routing = Literal["least-load", "prefix-affinity"]


class RouteTargetRecord(_Model):
    model: Name
    weight: Annotated[int, Field(ge=0, le=100)]  # a percentage of the route's traffic


class RouteGuardRecord(_Model):
    """A route's guard (catalog/schema.py's RouteGuard) in integers, as plans are written
    (planner/schema.py's one-walk dump takes no floats): parts per million, milliseconds."""

    max_error_ppm: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    max_ttft_p90_ms: Annotated[int, Field(ge=1, le=3_600_000)] | None = None
    window: Annotated[int, Field(ge=1, le=86_400)]  # seconds
    min_requests: Annotated[int, Field(ge=1, le=1_000_000)]


class RouteRecord(_Model):
    """A weighted route (docs/routes.md): its targets are models of the same state."""

    targets: Annotated[list[RouteTargetRecord], Field(min_length=1, max_length=16)]
    guard: RouteGuardRecord | None = None

    @model_validator(mode="after")
    def _split(self) -> RouteRecord:
        if sum(t.weight for t in self.targets) != 100 or len({t.model for t in self.targets}) != len(self.targets):
            raise ValueError("a route's targets are distinct models whose weights add up to 100")
        return self


class AdapterRecord(_Model):
    """A LoRA adapter of a model (catalog/schema.py's Adapter), as a router serves it: its names,
    and the scale llama.cpp applies it at per request (docs/adapters.md), in percent: plans are
    written without floats (as RouteGuardRecord)."""

    name: Name
    aliases: list[Name] = Field(default_factory=list)
    scale_percent: Annotated[int, Field(ge=1, le=10_000)] = 100


class ModelRecord(_Model):
    """What a router needs of a catalog model (or of a weighted route: `route` set, no replicas)."""

    name: Name
    aliases: list[Name] = Field(default_factory=list)
    fallbacks: list[Name] = Field(default_factory=list)
    scaling: ScalingRecord
    routing: Routing = "least-load"
    route: RouteRecord | None = None
    # Profile name -> its `max_in_flight` (catalog), for the profiles that set one: what
    # a replica of that profile holds at once before requests wait in the router.
    max_in_flight: dict[Name, Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=dict)
    adapters: list[AdapterRecord] = Field(default_factory=list)
    # `adapter_loading: runtime` (catalog): the most adapters the router keeps loaded on one
    # replica, loading on first use and unloading the least recently used (router/lora.py).
    # None: every adapter is loaded at start.
    max_loras: Annotated[int, Field(ge=1, le=256)] | None = None


class Shard(_Model):
    node: HostName
    rank: Rank
    gpus: list[GpuIndex] = Field(default_factory=list)
    port: Port
    unit: UnitName  # systemd unit name on `node`


class LoadedAdapter(_Model):
    """A LoRA adapter a replica's engine loaded: its name, and the weights cache entry it was
    loaded from (kept by weights GC while the replica runs, as the replica's own weights)."""

    name: Name
    cache_name: CacheFile | None = None
    # Loaded at run time (the model's `adapter_loading: runtime`): where apply fetched its weights
    # on rank 0's host, the one path the router sends the engine's load call (router/lora.py).
    # None: the engine loaded it at start.
    path: AdapterPath | None = None


class Replica(_Model):
    id: ReplicaId
    model: Name
    profile: Name
    engine: Engine
    state: ReplicaState
    endpoint: str  # where the router sends requests: rank 0's http://address:port
    shards: Annotated[list[Shard], Field(min_length=1)]
    created_at: datetime | None = None
    # A fingerprint of the profile and source the replica was made from; a change
    # means the definition changed and the replica is replaced.
    spec_hash: SpecHash = ""
    # The weights cache entry the replica serves from, so weights GC never takes the
    # weights of a replica whose model has already left the catalog.
    cache_name: CacheFile | None = None
    # The weights source as fetched; a whole Hugging Face repository pinned to the commit
    # it was planned with (hf://org/repo@COMMIT), so the weights a replica serves are on record.
    source: Source | None = None
    # The LoRA adapters its engine loaded at start, in the order it numbers them (llama.cpp's
    # ids): the router sends an adapter's requests only to replicas that list it.
    adapters: list[LoadedAdapter] = Field(default_factory=list)
    # Requests its engine runs at once, by the command line apply rendered (llmgw.engines
    # max_running: vLLM's --max-num-seqs or its default, SGLang's --max-running-requests): the
    # router's admission default for it. None: the engine says (llama.cpp), or nothing can.
    max_running: Annotated[int, Field(ge=1, le=65536)] | None = None

    @property
    def adapter_names(self) -> list[str]:
        return [a.name for a in self.adapters]

    @model_validator(mode="after")
    def _formed_by_llmgw(self) -> Replica:
        # Units and the endpoint are derived from the id, the ranks and the rank-0 port: a state
        # that says otherwise was edited (the endpoint's address is checked against the inventory
        # when planning: llmgw.planner.load).
        check_shards(self.id, [(s.rank, s.unit) for s in self.shards])
        endpoint_host(self.endpoint, next(s.port for s in self.shards if s.rank == 0))
        return self


class State(_Model):
    version: Literal[1] = 1
    serial: Annotated[int, Field(ge=0)] = 0
    lineage: Lineage = Field(default_factory=lambda: str(uuid.uuid4()))
    models: list[ModelRecord] = Field(default_factory=list)
    replicas: list[Replica] = Field(default_factory=list)

    def replica(self, replica_id: str) -> Replica | None:
        return next((r for r in self.replicas if r.id == replica_id), None)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def problem_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: `replicas[3].shards[0].unit`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def problems(exc: ValidationError, where: str, *, most: int = 5) -> list[str]:
    """`where: field.path: what is wrong (got VALUE)` for the first `most` errors of a validation."""
    out = []
    for e in exc.errors()[:most]:
        got = repr(e["input"]) if not isinstance(e["input"], dict | list) else ""
        msg = e["msg"].removeprefix("Value error, ")
        out.append(f"{where}: {problem_path(e['loc'])}: {msg}" + (f" (got {got[:120]})" if got else ""))
    if exc.error_count() > most:
        out.append(f"{where}: and {exc.error_count() - most} more")
    return out


def parse_state(text: str, where: str) -> State:
    """A state from its JSON text; `where` names its origin in the error."""
    try:
        return State.model_validate_json(text)
    except ValidationError as exc:
        found = problems(exc, where)
        raise StateError(f"{where} is not a llmgw state (version 1): {found[0].removeprefix(where + ': ')}",
                         detail=found[1:],
                         hint="llmgw writes the state and never reads a hand-edited one: restore it from its "
                              "backend's history, version control or a backup") from None
