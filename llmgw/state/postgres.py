"""The state in PostgreSQL: every serial kept, a leased lock, compare-and-set writes.

Tables (prefixed `llmgw_` so the state can share a database with the key store):

    llmgw_state_head     one row: the newest serial and its lineage (the row writes lock)
    llmgw_state_serials  every serial: lineage, the state's JSON, author, time, operation,
                         plan fingerprint, git commit
    llmgw_state_routers  the newest serial each router was seen to load (llmgw.apply.delivery)
    llmgw_locks          named leases: `state` (the writers' lock), `controller` (leader)

Time is the database's clock, never a client's, so hosts with skewed clocks agree on
when a lease ends. A lock holder renews its lease from a thread; a holder that dies
(even `kill -9`) stops renewing, and the lock is free once the lease runs out. Every
write re-checks, in the same transaction, that the writer still holds a live lease
(fencing): a holder that was paused past its lease cannot write over its successor.
Each write NOTIFYs `llmgw_state` with the new serial, for routers that follow the store.

Why long: writes, the lease and fencing share one connection and its transactions, and a
write's fencing check reads the lock table inside the write's own transaction.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from llmgw.errors import StateError
from llmgw.state.backend import LockInfo, SerialRecord, StateBackend, WriteMeta, default_author, describe_lock_error
from llmgw.state.backend import new_lock_id as _new_lock_id
from llmgw.state.model import State, parse_state
from llmgw.yamlio import atomic_write

log = logging.getLogger("llmgw.state")

DEFAULT_LEASE = 60.0
NOTIFY_CHANNEL = "llmgw_state"
STATE_LOCK = "state"

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS llmgw_state_head (
        id INT PRIMARY KEY CHECK (id = 1),
        serial BIGINT NOT NULL,
        lineage TEXT NOT NULL)""",
    "INSERT INTO llmgw_state_head (id, serial, lineage) VALUES (1, 0, '') ON CONFLICT (id) DO NOTHING",
    """CREATE TABLE IF NOT EXISTS llmgw_state_serials (
        serial BIGINT PRIMARY KEY,
        lineage TEXT NOT NULL,
        state TEXT NOT NULL,
        author TEXT NOT NULL,
        written_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        operation TEXT NOT NULL,
        plan TEXT NULL,
        git_commit TEXT NULL)""",
    """CREATE TABLE IF NOT EXISTS llmgw_state_routers (
        router TEXT PRIMARY KEY,
        serial BIGINT NOT NULL,
        delivered_at TIMESTAMPTZ NOT NULL DEFAULT now())""",
    """CREATE TABLE IF NOT EXISTS llmgw_locks (
        name TEXT PRIMARY KEY,
        lock_id TEXT NOT NULL,
        holder TEXT NOT NULL,
        operation TEXT NOT NULL,
        acquired_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL)""",
]


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class _Connection:
    """One connection, one transaction at a time, opened when first used and again when broken."""

    def __init__(self, connect: Callable[[], Any], where: str) -> None:
        self._connect = connect
        self._where = where
        self._mutex = threading.Lock()
        self._conn: Any = None

    @contextmanager
    def tx(self) -> Iterator[Any]:
        import psycopg

        with self._mutex:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = self._connect()
            try:
                with self._conn.transaction(), self._conn.cursor() as cur:
                    yield cur
            except psycopg.Error as exc:
                raise StateError(f"the state at {self._where}: {_first_line(exc)}") from None

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                self._conn.close()


class PostgresBackend(StateBackend):
    """A state several bastions and pipelines share; see the module docstring."""

    keeps_history = True

    def __init__(self, url: str, *, password: str | None = None, lease: float = DEFAULT_LEASE,
                 cache: Path | None = None) -> None:
        if lease <= 0:
            raise StateError(f"the state lock's lease must be positive seconds, not {lease}")
        self.url = url
        self.where = url
        self.lease = lease
        self.cache = cache  # the last state read or written, on disk: what routers are sent
        self._password = password
        self._held: LockInfo | None = None
        self._lost: dict[str, str] = {}  # lease name -> why it was lost while held
        self._main = _Connection(self._connect, self.where)  # the state's tables
        # The side tables (the controller's runs) on a connection of their own: a state write
        # waiting on a row lock holds the main one, and the controller's API must still list
        # its runs meanwhile (seen: the API hung for as long as an apply's write waited).
        self._side = _Connection(self._connect, self.where)
        self._migrate()

    # -- connections ----------------------------------------------------------------------

    def _connect(self) -> Any:
        import psycopg

        extra: dict[str, Any] = {"password": self._password} if self._password else {}
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10, **extra)
        except psycopg.Error as exc:
            raise StateError(f"cannot reach the state at {self.where}: {str(exc).strip().splitlines()[-1]}",
                             hint="check that PostgreSQL runs and the URL and user are right; the password comes "
                                  "from $LLMGW_STATE_PASSWORD, $LLMGW_STATE_PASSWORD_FILE or ~/.pgpass") from None

    def _tx(self) -> AbstractContextManager[Any]:
        return self._main.tx()

    def transaction(self) -> AbstractContextManager[Any]:
        """A cursor in one transaction for tables kept beside the state (the controller's runs),
        on the side connection."""
        return self._side.tx()

    def _migrate(self) -> None:
        with self._tx() as cur:
            # A read-only role (a pull request's plan) can neither create nor insert: when the
            # schema is complete, there is nothing to do.
            cur.execute("SELECT to_regclass('llmgw_state_head') IS NOT NULL AND to_regclass('llmgw_state_serials') "
                        "IS NOT NULL AND to_regclass('llmgw_state_routers') IS NOT NULL AND "
                        "to_regclass('llmgw_locks') IS NOT NULL")
            if cur.fetchone()[0]:
                return
            cur.execute("SELECT pg_advisory_xact_lock(7340044)")  # CREATE races between processes
            for stmt in _SCHEMA:
                cur.execute(stmt)

    def close(self) -> None:
        self._main.close()
        self._side.close()

    # -- reading --------------------------------------------------------------------------

    def _remember(self, state: State) -> State:
        if self.cache is not None and state.serial:
            text = state.to_json()
            try:
                same = self.cache.read_text(encoding="utf-8") == text
            except OSError:
                same = False
            if not same:
                atomic_write(self.cache, text)
        return state

    def read(self) -> State:
        with self._tx() as cur:
            cur.execute("SELECT h.serial, s.state FROM llmgw_state_head h "
                        "LEFT JOIN llmgw_state_serials s ON s.serial = h.serial WHERE h.id = 1")
            row = cur.fetchone()
        if row is None or not row[0] or row[1] is None:
            return State(lineage="")
        return self._remember(parse_state(row[1], f"serial {row[0]} at {self.where}"))

    def read_serial(self, serial: int) -> State:
        with self._tx() as cur:
            cur.execute("SELECT state FROM llmgw_state_serials WHERE serial = %s", (serial,))
            row = cur.fetchone()
        if row is None:
            raise StateError(f"the state at {self.where} has no serial {serial}",
                             hint="`llmgw state list` shows the serials it keeps")
        return parse_state(row[0], f"serial {serial} at {self.where}")

    def history(self) -> list[SerialRecord]:
        with self._tx() as cur:
            cur.execute("SELECT serial, lineage, author, written_at, operation, plan, git_commit "
                        "FROM llmgw_state_serials ORDER BY serial")
            rows = cur.fetchall()
        return [SerialRecord(serial=r[0], lineage=r[1], author=r[2], written_at=r[3], operation=r[4], plan=r[5],
                             git_commit=r[6]) for r in rows]

    # -- writing --------------------------------------------------------------------------

    def _store(self, state: State, *, expect_serial: int, expect_lineage: str | None, meta: WriteMeta,
               new_serial: int | None = None) -> State:
        with self._tx() as cur:
            cur.execute("SELECT serial, lineage FROM llmgw_state_head WHERE id = 1 FOR UPDATE")
            serial, lineage = cur.fetchone()
            self._check_lock(cur)
            if serial != expect_serial:
                raise StateError(f"the state at {self.where} moved on underneath (serial {serial}, expected "
                                 f"{expect_serial})", hint="make a new plan from the newest state")
            if expect_lineage and lineage and lineage != expect_lineage:
                raise StateError(f"the state at {self.where} is of lineage {lineage}, not {expect_lineage}",
                                 hint="this state belongs to another fleet's history; make a new plan from it")
            number = max(serial + 1, new_serial or 0)
            new = state.model_copy(update={"serial": number,
                                           "lineage": state.lineage or lineage or str(uuid.uuid4())})
            cur.execute("INSERT INTO llmgw_state_serials (serial, lineage, state, author, operation, plan, git_commit) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (new.serial, new.lineage, new.to_json(), meta.author, meta.operation, meta.plan,
                         meta.git_commit))
            cur.execute("UPDATE llmgw_state_head SET serial = %s, lineage = %s WHERE id = 1", (new.serial, new.lineage))
            cur.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, str(new.serial)))
        return self._remember(new)

    # -- following ------------------------------------------------------------------------

    def follow(self, on_state: Callable[[State], None], stop: threading.Event, *, poll: float = 10.0,
               retry: float = 2.0) -> None:
        """Hand every new serial to `on_state` until `stop` is set: LISTEN for the NOTIFY each
        write sends, and read anyway every `poll` seconds (a missed notification costs at most
        that). While the database is unreachable nothing is handed over, so whatever
        `on_state` keeps (a file the router reads) stays the last good copy; it reconnects
        every `retry` seconds."""
        import psycopg

        last = 0
        while not stop.is_set():
            conn: Any = None
            try:
                conn = self._connect()
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                while not stop.is_set():
                    state = self.read()
                    if state.serial > last:
                        on_state(state)
                        last = state.serial
                    waited = 0.0
                    while not stop.is_set() and waited < poll:  # in slices, so stop is seen soon
                        if list(conn.notifies(timeout=min(1.0, poll), stop_after=1)):
                            break
                        waited += min(1.0, poll)
            except (psycopg.Error, StateError) as exc:
                log.warning("following the state at %s: %s; keeping the last good copy, retrying", self.where,
                            _first_line(exc))
                stop.wait(retry)
            finally:
                if conn is not None:
                    conn.close()

    # -- the lock -------------------------------------------------------------------------

    def _check_lock(self, cur: Any) -> None:
        """Inside a write's transaction: the writer must hold a live lease, or nobody may hold one."""
        cur.execute("SELECT lock_id, holder, operation, acquired_at, expires_at, expires_at > now() "
                    "FROM llmgw_locks WHERE name = %s", (STATE_LOCK,))
        row = cur.fetchone()
        live = row is not None and row[5]
        if self._held is not None and row is not None and not live and row[0] == self._held.id \
                and STATE_LOCK not in self._lost:
            # Lapsed (a stall) but taken by nobody since: still ours, extended with this write.
            cur.execute("UPDATE llmgw_locks SET expires_at = now() + make_interval(secs => %s) WHERE name = %s "
                        "AND lock_id = %s", (self.lease, STATE_LOCK, row[0]))
            live = True
        if self._held is not None:
            if STATE_LOCK in self._lost or not live or row[0] != self._held.id:
                raise StateError(f"this process lost its lock on the state at {self.where} (its lease ran out"
                                 + (f"; now held by {row[1]}" if live and row[0] != self._held.id else "") + ")",
                                 hint="nothing more was written; make a new plan and apply again")
        elif live:
            raise describe_lock_error(LockInfo(row[0], row[1], row[2], row[3], row[4]), self.where)

    def _take(self, name: str, operation: str, holder: str) -> LockInfo | None:
        """One attempt at the lease `name`; None when another live holder has it."""
        lock_id = _new_lock_id()
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO llmgw_locks (name, lock_id, holder, operation, acquired_at, expires_at) "
                "VALUES (%s, %s, %s, %s, now(), now() + make_interval(secs => %s)) "
                "ON CONFLICT (name) DO UPDATE SET lock_id = EXCLUDED.lock_id, holder = EXCLUDED.holder, "
                "operation = EXCLUDED.operation, acquired_at = EXCLUDED.acquired_at, "
                "expires_at = EXCLUDED.expires_at WHERE llmgw_locks.expires_at <= now() "
                "RETURNING acquired_at, expires_at", (name, lock_id, holder, operation, self.lease))
            row = cur.fetchone()
        if row is None:
            return None
        return LockInfo(lock_id, holder, operation, row[0], row[1])

    def _holder(self, name: str) -> LockInfo | None:
        with self._tx() as cur:
            cur.execute("SELECT lock_id, holder, operation, acquired_at, expires_at FROM llmgw_locks "
                        "WHERE name = %s AND expires_at > now()", (name,))
            row = cur.fetchone()
        return None if row is None else LockInfo(row[0], row[1], row[2], row[3], row[4])

    def _renew(self, conn: Any, name: str, lock_id: str) -> tuple[datetime | None, bool]:
        """Extend the lease `lock_id` holds; (new end, whether it had lapsed), or (None, _) when
        another holder took it or it was broken.

        A lapsed lease that is still this holder's row was taken by nobody since (taking it
        replaces the lock id, releasing it deletes the row), so extending it is safe: and
        every write is a compare-and-set on the serial besides. This keeps a long apply's
        lock through a stall of this process or its host longer than the renewal margin."""
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT expires_at <= now() FROM llmgw_locks WHERE name = %s AND lock_id = %s FOR UPDATE",
                        (name, lock_id))
            row = cur.fetchone()
            if row is None:
                return None, False
            cur.execute("UPDATE llmgw_locks SET expires_at = now() + make_interval(secs => %s) "
                        "WHERE name = %s AND lock_id = %s RETURNING expires_at", (self.lease, name, lock_id))
            return cur.fetchone()[0], bool(row[0])

    def _heartbeat(self, name: str, info: LockInfo, stop: threading.Event) -> None:
        """Renew the lease every sixth of it, on a connection of its own (a renewal may fail or
        come late a few times before the lease runs out)."""
        import psycopg

        conn: Any = None
        every = self.lease / 6
        last = time.monotonic()
        while not stop.wait(every):
            # Late, split in two: waking (this process starved of CPU or the GIL) and the
            # renewal itself (the database, or the network to it, slow to answer).
            woke = time.monotonic()
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                until, lapsed = self._renew(conn, name, info.id)
                if until is None:
                    self._lost[name] = f"the lease on {name} ran out and another holder took it"
                    log.error("lost the %s lock %s: %s", name, info.id, self._lost[name])
                    break
                done = time.monotonic()
                late, asleep, took = done - last - every, woke - last - every, done - woke
                last = done
                if lapsed or late > every:
                    log.warning("the %s lease was renewed %.1f s late (woke %.1f s late, the renewal took %.1f s)%s",
                                name, late, asleep, took,
                                "; it had run out, and nobody had taken it" if lapsed else "")
            except (psycopg.Error, StateError) as exc:
                log.warning("could not renew the %s lease (%s); retrying", name, exc)
        if conn is not None:
            conn.close()

    @contextmanager
    def lease_on(self, name: str, operation: str, *, holder: str | None = None) -> Iterator[LockInfo]:
        """Hold the lease `name` while the block runs, renewing it; refused at once when held."""
        who = holder or f"{default_author()} pid {os.getpid()}"
        self._lost.pop(name, None)
        info = self._take(name, operation, who)
        if info is None:
            current = self._holder(name)
            if current is None:  # it ran out between the two queries: one more try
                info = self._take(name, operation, who)
            if info is None:
                raise describe_lock_error(current or LockInfo("?", "another process", "?", None, None), self.where)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(name, info, stop), daemon=True,
                                name=f"llmgw-lease-{name}")
        beat.start()
        try:
            yield info
        finally:
            stop.set()
            beat.join()
            with self._tx() as cur:
                cur.execute("DELETE FROM llmgw_locks WHERE name = %s AND lock_id = %s", (name, info.id))

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        if self._held is not None:
            raise StateError("this process already holds the state lock")
        with self.lease_on(STATE_LOCK, operation) as info:
            self._held = info
            try:
                yield info
            finally:
                self._held = None

    def lock_info(self) -> LockInfo | None:
        return self._holder(STATE_LOCK)

    def lease_lost(self, name: str) -> str | None:
        """Why the lease `name` this process holds was lost (not renewed in time), or None."""
        return self._lost.get(name)

    def lease_holder(self, name: str) -> LockInfo | None:
        return self._holder(name)

    def unlock(self, lock_id: str) -> LockInfo:
        with self._tx() as cur:
            cur.execute("DELETE FROM llmgw_locks WHERE name = %s AND lock_id = %s "
                        "RETURNING lock_id, holder, operation, acquired_at, expires_at", (STATE_LOCK, lock_id))
            row = cur.fetchone()
        if row is None:
            now = self.lock_info()
            raise StateError(f"no lock {lock_id} on the state at {self.where}",
                             detail=[f"the lock now: {now.describe()}" if now else "nobody holds the lock now"])
        return LockInfo(row[0], row[1], row[2], row[3], row[4])
