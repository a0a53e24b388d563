"""What every state backend offers: read, compare-and-set write, a named lock, history.

    StateBackend   the interface apply, plan and `llmgw state` use (what a backend offers
                   beyond it, callers ask for: llmgw.state.capabilities)
    WriteMeta      who writes a serial, doing what, from which plan and git commit
    SerialRecord   one serial as history keeps it
    LockInfo       who holds the lock, for what, since when, until when (the lease)

A write is a compare-and-set on (lineage, serial): it names the serial it was made
from, and is refused when the backend has moved on or holds another lineage, so
two writers never silently overwrite each other. `push` is the one deliberate
overwrite, refused unless forced, and says what forcing loses.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Self

from llmgw.childenv import child_env
from llmgw.errors import StateError
from llmgw.state.model import State


def default_author() -> str:
    """Who is writing: $LLMGW_AUTHOR (a pipeline names its run), else user@host."""
    named = os.environ.get("LLMGW_AUTHOR", "").strip()
    if named:
        return named[:200]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def git_commit(folder: Path) -> str | None:
    """The commit the site folder is checked out at (`-dirty` with local changes), if it is a repository."""
    try:
        done = subprocess.run(["git", "-C", str(folder), "describe", "--always", "--dirty", "--abbrev=40"],
                              capture_output=True, text=True, timeout=10, check=False, env=child_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


@dataclass(frozen=True)
class WriteMeta:
    operation: str = "apply"  # apply | push | migrate | import | activate | ...
    author: str = field(default_factory=default_author)
    plan: str | None = None  # the plan's fingerprint, when a saved plan is applied
    git_commit: str | None = None


@dataclass(frozen=True)
class SerialRecord:
    serial: int
    lineage: str
    author: str
    written_at: datetime | None
    operation: str
    plan: str | None = None
    git_commit: str | None = None

    def as_json(self) -> dict[str, object]:
        return {"serial": self.serial, "lineage": self.lineage, "author": self.author,
                "written_at": self.written_at.isoformat() if self.written_at else None,
                "operation": self.operation, "plan": self.plan, "git_commit": self.git_commit}


@dataclass(frozen=True)
class LockInfo:
    id: str
    holder: str
    operation: str
    acquired_at: datetime | None
    expires_at: datetime | None  # the lease's end; None: held until the holding process exits

    def describe(self) -> str:
        since = f" since {self.acquired_at.isoformat(timespec='seconds')}" if self.acquired_at else ""
        until = f", lease until {self.expires_at.isoformat(timespec='seconds')}" if self.expires_at else ""
        return f"{self.holder} ({self.operation}{since}{until}; lock id {self.id})"

    def as_json(self) -> dict[str, object]:
        return {"id": self.id, "holder": self.holder, "operation": self.operation,
                "acquired_at": self.acquired_at.isoformat() if self.acquired_at else None,
                "expires_at": self.expires_at.isoformat() if self.expires_at else None}


def new_lock_id() -> str:
    return uuid.uuid4().hex[:16]


def _ids(state: State) -> set[str]:
    return {r.id for r in state.replicas}


class StateBackend(ABC):
    """One place the state lives. Subclasses: LocalBackend (a file), PostgresBackend."""

    #: What to call this backend in messages: a path or a URL without secrets.
    where: str
    #: Whether old serials can be read back (`llmgw state show SERIAL`).
    keeps_history: bool = False

    @abstractmethod
    def read(self) -> State:
        """The newest state; an empty backend is the empty state at serial 0 with no lineage."""

    @abstractmethod
    def _store(self, state: State, *, expect_serial: int, expect_lineage: str | None, meta: WriteMeta,
               new_serial: int | None = None) -> State:
        """Write `state` as serial expect_serial + 1 (or `new_serial` when higher) if the backend is
        still at (expect_lineage, expect_serial); expect_lineage None accepts any. Returns what was
        written; a state without lineage takes the backend's, or a new one."""

    @abstractmethod
    def lock(self, operation: str) -> AbstractContextManager[LockInfo]:
        """Hold the lock for `operation`; refused at once, naming the holder, when someone holds it."""

    @abstractmethod
    def lock_info(self) -> LockInfo | None:
        """The current holder, or None when nobody holds the lock."""

    @abstractmethod
    def unlock(self, lock_id: str) -> LockInfo:
        """Break the lock `lock_id` (another holder's), returning what it was."""

    @abstractmethod
    def history(self) -> list[SerialRecord]:
        """Every serial kept, oldest first."""

    def read_serial(self, serial: int) -> State:
        current = self.read()
        if serial == current.serial:
            return current
        raise StateError(f"the state at {self.where} keeps only its newest serial ({current.serial})",
                         hint="a PostgreSQL state (`state: postgresql://...`) keeps every serial")

    @abstractmethod
    def close(self) -> None:
        """Release connections; the backend is not used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ---------------------------------------------------------------------------

    def write(self, state: State, *, expect_serial: int, meta: WriteMeta | None = None) -> State:
        """Write `state` made from serial `expect_serial` of the same lineage: compare-and-set.

        A state with no lineage yet takes the backend's, or a new one on the first write."""
        return self._store(state, expect_serial=expect_serial, expect_lineage=state.lineage or None,
                           meta=meta or WriteMeta())

    def push(self, state: State, *, force: bool = False, meta: WriteMeta | None = None) -> State:
        """Replace the newest state with `state` (`llmgw state push`), written as the next serial.

        Refused, unless forced, when `state` is of another lineage or not newer than the
        backend's newest serial; the refusal says what forcing would lose."""
        current = self.read()
        problems = []
        if current.lineage and state.lineage and state.lineage != current.lineage:
            problems.append(f"it is of lineage {state.lineage}, and the state at {self.where} is of lineage "
                            f"{current.lineage}")
        if current.serial and state.serial <= current.serial and state != current:
            problems.append(f"its serial {state.serial} is not newer than serial {current.serial} there")
        if problems and not force:
            lost = sorted(_ids(current) - _ids(state))
            loses = [f"serial {current.serial} would no longer be the newest (it stays in the history "
                     "where the backend keeps one)" if self.keeps_history else
                     f"serial {current.serial} would be overwritten (this backend keeps no history)"]
            if lost:
                loses.append(f"replicas recorded only there would be forgotten: {', '.join(lost)} "
                             "(their units would then be left running, unmanaged)")
            if current.lineage and state.lineage and state.lineage != current.lineage:
                loses.append(f"units written under lineage {current.lineage} would become foreign to "
                             "this state: plans would no longer manage them")
            raise StateError("refusing to push: " + "; ".join(problems),
                             detail=["--force would mean:", *(f"  {x}" for x in loses)],
                             hint="pull the newest state (`llmgw state pull`) and work from it, or push with "
                                  "--force if the file really is the truth")
        if state == current:
            return current
        pushed = state.model_copy(update={"lineage": state.lineage or current.lineage})
        return self._store(pushed, expect_serial=current.serial, expect_lineage=None, meta=meta or WriteMeta("push"),
                           new_serial=state.serial)

    def seed(self, state: State, meta: WriteMeta) -> State:
        """Write `state` keeping its serial and lineage into an empty backend (`llmgw state migrate`),
        so plans and routers that know that serial stay right."""
        current = self.read()
        if current.serial:
            raise StateError(f"the state at {self.where} is not empty (serial {current.serial}, lineage "
                             f"{current.lineage})", hint="migrate into an empty database, schema or file")
        return self._store(state, expect_serial=0, expect_lineage=None, meta=meta, new_serial=state.serial)


class LockHeld(StateError):
    """Someone else holds the state's lock (`holder` says who)."""

    def __init__(self, message: str, *, holder: LockInfo, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.holder = holder


def describe_lock_error(info: LockInfo, where: str) -> LockHeld:
    hint = ("wait for it to finish (`--lock-timeout`), or when its holder is gone for good: "
            + ("`llmgw state unlock " + info.id + "`" if info.expires_at is not None else
               "the lock ends when that process exits")
            + (" (the lease ends on its own if the holder died)" if info.expires_at is not None else ""))
    return LockHeld(f"the state at {where} is locked by {info.describe()}", holder=info, hint=hint)


@contextmanager
def lock_waiting(backend: StateBackend, operation: str, timeout: float, *, poll: float = 1.0,
                 on_wait: Callable[[LockInfo], None] | None = None) -> Iterator[LockInfo]:
    """`backend.lock(operation)`, waiting up to `timeout` seconds for another holder to let go
    (checking every `poll` seconds); then refused like `lock`, naming the holder."""
    deadline = time.monotonic() + timeout
    told = False
    while True:
        stack = ExitStack()
        try:
            info = stack.enter_context(backend.lock(operation))
        except LockHeld as held:
            if time.monotonic() >= deadline:
                raise
            if on_wait is not None and not told:
                on_wait(held.holder)
                told = True
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            continue
        with stack:  # only taking the lock is retried, never the caller's block
            yield info
        return

