"""The applied state's schema: the record of what runs where, and the router's only input.

Schema version 1 (pinned; README "State file" documents it):

    {"version": 1, "serial": 7, "lineage": "<uuid>",
     "models":   [{"name", "aliases", "fallbacks", "scaling": {"min", "max", "idle_timeout"},
                   "routing": "least-load|prefix-affinity"}],
     "replicas": [{"id", "model", "profile", "engine", "state": "starting|ready|draining",
                   "endpoint": "http://host:port", "created_at",
                   "shards": [{"node", "rank", "gpus", "port", "unit"}]}]}

A backend (llmgw.state.local, llmgw.state.postgres) writes it under a lock, and `serial`
grows by one on every write, so a plan made against serial N is refused once the
state has moved on.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmgw.errors import StateError

STATE_VERSION = 1
ReplicaState = Literal["starting", "ready", "draining"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScalingRecord(_Model):
    min: int
    max: int
    idle_timeout: int  # seconds


# How a router picks among a model's replicas (llmgw/router/balance.py); the catalog's
# `routing:` key (catalog/schema.py's Routing, checked equal by tests/router/test_balance.py).
Routing = Literal["least-load", "prefix-affinity"]


class ModelRecord(_Model):
    """What a router needs of a catalog model."""

    name: str
    aliases: list[str] = Field(default_factory=list)
    fallbacks: list[str] = Field(default_factory=list)
    scaling: ScalingRecord
    routing: Routing = "least-load"


class Shard(_Model):
    node: str
    rank: int
    gpus: list[int] = Field(default_factory=list)
    port: Annotated[int, Field(ge=1, le=65535)]
    unit: str  # systemd unit name on `node`


class Replica(_Model):
    id: str
    model: str
    profile: str
    engine: str
    state: ReplicaState
    endpoint: str  # where the router sends requests: rank 0's http://address:port
    shards: list[Shard]
    created_at: datetime | None = None
    # A fingerprint of the profile and source the replica was made from; a change
    # means the definition changed and the replica is replaced.
    spec_hash: str = ""
    # The weights cache entry the replica serves from, so weights GC never takes the
    # weights of a replica whose model has already left the catalog.
    cache_name: str | None = None
    # The weights source as fetched; a whole Hugging Face repository pinned to the commit
    # it was planned with (hf://org/repo@COMMIT), so the weights a replica serves are on record.
    source: str | None = None


class State(_Model):
    version: Literal[1] = 1
    serial: int = 0
    lineage: str = Field(default_factory=lambda: str(uuid.uuid4()))
    models: list[ModelRecord] = Field(default_factory=list)
    replicas: list[Replica] = Field(default_factory=list)

    def replica(self, replica_id: str) -> Replica | None:
        return next((r for r in self.replicas if r.id == replica_id), None)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def parse_state(text: str, where: str) -> State:
    """A state from its JSON text; `where` names its origin in the error."""
    try:
        return State.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise StateError(f"{where} is not a llmgw state (version 1): {loc}: {first['msg']}",
                         hint="restore it from version control or a backup; llmgw never edits it by hand") from None
