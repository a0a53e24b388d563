"""The applied state: the record of what runs where, and the router's only input.

Schema version 1 (pinned; README "State file" documents it):

    {"version": 1, "serial": 7, "lineage": "<uuid>",
     "models":   [{"name", "aliases", "fallbacks", "scaling": {"min", "max", "idle_timeout"}}],
     "replicas": [{"id", "model", "profile", "engine", "state": "starting|ready|draining",
                   "endpoint": "http://host:port", "created_at",
                   "shards": [{"node", "rank", "gpus", "port", "unit"}]}]}

Written atomically (temp file, fsync, rename) under an exclusive lock, and `serial`
grows by one on every write, so a plan made against serial N is refused once the
state has moved on.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmgw.errors import StateError
from llmgw.yamlio import atomic_write

STATE_VERSION = 1
ReplicaState = Literal["starting", "ready", "draining"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScalingRecord(_Model):
    min: int
    max: int
    idle_timeout: int  # seconds


class ModelRecord(_Model):
    """What a router needs of a catalog model."""

    name: str
    aliases: list[str] = Field(default_factory=list)
    fallbacks: list[str] = Field(default_factory=list)
    scaling: ScalingRecord


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


def read_state(path: Path) -> State:
    """The state at `path`; an absent file is the empty state at serial 0."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return State(lineage="")
    except OSError as exc:
        raise StateError(f"cannot read state file {path}: {exc.strerror}") from None
    try:
        return State.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StateError(f"state file {path} is not a llmgw state (version 1): {where}: {first['msg']}",
                         hint="restore it from version control or a backup; llmgw never edits it by hand") from None


def write_state(path: Path, state: State, *, expect_serial: int | None = None) -> State:
    """Write `state` with serial + 1 and return what was written.

    With `expect_serial`, refuse when the file on disk has moved on since it was read:
    two writers must never silently overwrite each other.
    """
    current = read_state(path)
    if expect_serial is not None and current.serial != expect_serial:
        raise StateError(f"state file {path} changed underneath (serial {current.serial}, "
                         f"expected {expect_serial})", hint="re-run the command to work from the newest state")
    lineage = state.lineage or current.lineage or str(uuid.uuid4())
    new = state.model_copy(update={"serial": current.serial + 1, "lineage": lineage})
    atomic_write(path, new.to_json())
    return new


@contextmanager
def state_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the state file; a second holder is refused at once."""
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise StateError(f"the state {path} is locked by {holder}",
                             hint="wait for the other apply to finish; the lock is released when it exits") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {datetime.now().isoformat(timespec='seconds')}".encode(), 0)
        yield
    finally:
        os.close(fd)
