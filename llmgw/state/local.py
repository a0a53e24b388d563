"""The state as a local file (the default backend): atomic writes, an flock beside it.

The file is replaced atomically (temp file, fsync, rename), so a reader (a router)
never sees half of it. The lock is an `flock` on `<state>.lock`, which the kernel
releases when its holder exits, however it exits; the lock file names the holder
and the operation for whoever is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from llmgw.errors import StateError
from llmgw.state.backend import LockInfo, SerialRecord, StateBackend, WriteMeta, default_author, describe_lock_error
from llmgw.state.backend import new_lock_id as _new_lock_id
from llmgw.state.model import State, parse_state
from llmgw.yamlio import atomic_write

# The last state parsed, by file identity. `llmgw status` reads the state for its views and again
# through the backend for the summary; the dashboard on every page: parse each version of the file
# once (0.1 s a parse at 10,000 replicas). Every write is a rename (a new inode), so the file's
# identity says whether it is still that version; a State is frozen, so sharing it is safe.
_last: tuple[tuple[str, int, int, int], State] | None = None


def read_state(path: Path) -> State:
    """The state at `path`; an absent file is the empty state at serial 0."""
    global _last
    try:
        with path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
            if _last is not None and _last[0] == key:
                return _last[1]
            data = fh.read()
    except FileNotFoundError:
        return State(lineage="")
    except OSError as exc:
        raise StateError(f"cannot read state file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:  # say where, as for every file llmgw reads
        line = data.count(b"\n", 0, exc.start) + 1
        raise StateError(f"state file {path}:{line}: is not UTF-8 text (byte offset {exc.start})",
                         hint="restore the state file from its backend or version control") from None
    state = parse_state(text, f"state file {path}")
    _last = (key, state)
    return state


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


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _read_holder(fd: int) -> LockInfo:
    raw = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    try:
        data = json.loads(raw)
        return LockInfo(id=str(data["id"]), holder=str(data["holder"]), operation=str(data["operation"]),
                        acquired_at=datetime.fromisoformat(str(data["acquired_at"])), expires_at=None)
    except (ValueError, KeyError, TypeError):
        return LockInfo(id="?", holder=raw or "another process", operation="?", acquired_at=None, expires_at=None)


@contextmanager
def state_lock(path: Path, operation: str = "apply") -> Iterator[LockInfo]:
    """Hold an exclusive lock beside the state file; a second holder is refused at once."""
    lock_path = _lock_path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise describe_lock_error(_read_holder(fd), str(path)) from None
        info = LockInfo(id=_new_lock_id(), holder=f"{default_author()} pid {os.getpid()}", operation=operation,
                        acquired_at=datetime.now(UTC).replace(microsecond=0), expires_at=None)
        os.ftruncate(fd, 0)
        body = {"id": info.id, "holder": info.holder, "operation": operation,
                "acquired_at": info.acquired_at.isoformat() if info.acquired_at else None, "pid": os.getpid()}
        os.pwrite(fd, json.dumps(body).encode(), 0)
        yield info
    finally:
        os.close(fd)


class LocalBackend(StateBackend):
    """The state in one file on this machine: today's behaviour, and the default."""

    keeps_history = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def read(self) -> State:
        return read_state(self.path)

    def close(self) -> None:
        """Nothing to release: every call opens and closes the file."""

    def _store(self, state: State, *, expect_serial: int, expect_lineage: str | None, meta: WriteMeta,
               new_serial: int | None = None) -> State:
        current = read_state(self.path)
        if current.serial != expect_serial:
            raise StateError(f"state file {self.path} changed underneath (serial {current.serial}, "
                             f"expected {expect_serial})", hint="make a new plan from the newest state")
        if expect_lineage and current.lineage and current.lineage != expect_lineage:
            raise StateError(f"state file {self.path} is of lineage {current.lineage}, not {expect_lineage}",
                             hint="this state belongs to another fleet's history; make a new plan from it")
        lineage = state.lineage or current.lineage or str(uuid.uuid4())
        new = state.model_copy(update={"serial": max(current.serial + 1, new_serial or 0), "lineage": lineage})
        atomic_write(self.path, new.to_json())
        return new

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        with state_lock(self.path, operation) as info:
            yield info

    def lock_info(self) -> LockInfo | None:
        lock_path = _lock_path(self.path)
        try:
            fd = os.open(lock_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_holder(fd)
            return None
        finally:
            os.close(fd)

    def unlock(self, lock_id: str) -> LockInfo:
        info = self.lock_info()
        if info is None:
            raise StateError(f"the state at {self.where} is not locked")
        raise StateError(f"the local lock {info.id} is held by {info.holder} and ends only when that process exits",
                         hint="stop that process (a local lock never outlives its holder)")

    def history(self) -> list[SerialRecord]:
        current = self.read()
        if not current.serial:
            return []
        try:
            written = datetime.fromtimestamp(self.path.stat().st_mtime, UTC).replace(microsecond=0)
        except OSError:
            written = None
        # A local file records no author, operation or older serials (PostgreSQL does).
        return [SerialRecord(serial=current.serial, lineage=current.lineage, author="",
                             written_at=written, operation="-")]
