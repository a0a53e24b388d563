"""What a state backend may offer beyond its core, asked for by capability, never by class.

Every backend is a StateBackend (read, compare-and-set write, a named lock, history). Some
offer more, each as a small protocol:

    Leases      named leases beside the state's lock (the controller's leadership)
    Follow      every new serial pushed as it is written (LISTEN/NOTIFY), for a router's follower
    Database    a SQL database holding the state, for tables kept beside it (the controller's
                runs, router deliveries, database roles)
    FileBacked  a file on this machine, for files kept beside it

Callers ask `offers(backend, Leases)` (None when it lacks it) or `require(backend, Leases,
to="...")` (a StateError naming what to change), not `isinstance(backend, PostgresBackend)`:
a third backend offers what it can and every caller sees it (terraform's statemgr asks for
`Locker` or `Persister` the same way).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from llmgw.errors import StateError
from llmgw.state.backend import LockInfo, StateBackend
from llmgw.state.model import State

__all__ = ["Database", "FileBacked", "Follow", "Leases", "offers", "require"]

C = TypeVar("C")


@runtime_checkable
class Leases(Protocol):
    """Named leases that end on their own when the holder stops renewing them."""

    def lease_on(self, name: str, operation: str, *, holder: str | None = None) -> AbstractContextManager[LockInfo]:
        """Hold the lease `name` while the block runs; refused at once, naming the holder, when held."""

    def lease_lost(self, name: str) -> str | None:
        """Why the lease `name` this process holds was lost, or None while it holds it."""

    def lease_holder(self, name: str) -> LockInfo | None:
        """Who holds the lease `name` now."""


@runtime_checkable
class Follow(Protocol):
    """Every new serial handed over as it is written."""

    #: Where the backend keeps a copy of what it last read (None: nowhere).
    cache: Path | None

    def follow(self, on_state: Callable[[State], None], stop: threading.Event, *, poll: float = 10.0,
               retry: float = 2.0) -> None:
        """Call `on_state` with each new serial until `stop` is set."""


@runtime_checkable
class Database(Protocol):
    """The state lives in a SQL database that other tables can share."""

    def transaction(self) -> AbstractContextManager[Any]:
        """A cursor in one transaction, for tables kept beside the state."""


@runtime_checkable
class FileBacked(Protocol):
    """The state is one file on this machine."""

    path: Path


# What each capability is called in an error, and what the backend lacking it should become.
_NAMES: dict[type, str] = {
    Leases: "no leases",
    Follow: "no notifications of new serials to follow",
    Database: "no database",
    FileBacked: "no file on this machine",
}


def offers(backend: StateBackend, capability: type[C]) -> C | None:
    """`backend` as `capability` when it offers it, else None."""
    return backend if isinstance(backend, capability) else None


def require(backend: StateBackend, capability: type[C], *, to: str) -> C:
    """`backend` as `capability`, or a StateError saying which state offers it, for doing `to`."""
    if isinstance(backend, capability):
        return backend
    local = isinstance(backend, FileBacked)
    what = f"the local state file {backend.where}" if local else f"the state at {backend.where}"
    if capability is FileBacked:
        hint = f"use a local state file (`state: state.json` in llmgw.yaml) to {to}"
    else:
        hint = f"use a PostgreSQL state (`state: postgresql://...` in llmgw.yaml) to {to}"
    raise StateError(f"{what} has {_NAMES[capability]}", hint=hint)
