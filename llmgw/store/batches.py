"""The Batch API's records in the key store: files, batches, and each batch's requests.

The tables are in store/sql.py with the rest of the schema; this module holds their
queries, over the same connection and transactions (`SqlStore._run`), so SQLite and
PostgreSQL share them as they share every other query.

What makes a batch safe across routers and restarts:

- one router at a time runs a batch: it holds the batch's lease (`lease_owner`,
  `lease_expires`), claimed with one conditional UPDATE and renewed while it runs; a
  router that dies stops renewing and another (or the same, restarted) claims it;
- a request is marked `started` before it is sent, in an UPDATE that succeeds only while
  the lease is still this router's, so a router that lost its lease sends nothing more;
- a request found `started` by the router that claims the batch next may or may not have
  run on an engine (the router died between sending and recording): it is marked failed
  with an error line (`interrupted`), never sent again (batch_runner.py `ORPHANED`).

Owners are `group:NAME` for a key in a group and `key:ID` for a key in none: every key of
a group sees its group's files and batches, and no one else's.

Why long: the queries of three tables that change together (a request's end and its
batch's counts, a batch's end and its files), each in its one transaction, side by side.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmgw.errors import StoreError
from llmgw.store.sql import SqlStore, _Cursor


class BatchConflict(StoreError):
    """A request the records refuse (deleting a file a batch reads, cancelling an ended
    batch): the client's to change, not the store failing."""


# A batch still to be run (or finished off) by whichever router holds its lease.
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
ENDED = ("failed", "completed", "expired", "cancelled")


@dataclass(frozen=True)
class FileRecord:
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    expires_at: int | None = None


@dataclass(frozen=True)
class BatchRecord:
    id: str
    owner: str
    key_id: str
    endpoint: str
    model: str | None
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None
    times: dict[str, int | None] = field(default_factory=dict)  # in_progress_at ... cancelled_at
    total: int = 0
    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    lease_owner: str | None = None


@dataclass(frozen=True)
class BatchLine:
    """One input line of a batch: where its bytes lie in the input file."""

    line: int  # 1-based, as the input file numbers it
    custom_id: str
    start: int
    length: int


TIMES = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
         "cancelled_at")
_FILE_COLS = "id, owner, purpose, filename, bytes, created_at, expires_at"
_BATCH_COLS = ("id, owner, key_id, endpoint, model, input_file_id, completion_window, status, created_at, "
               "expires_at, output_file_id, error_file_id, errors, metadata, " + ", ".join(TIMES)
               + ", total, completed, failed, input_tokens, output_tokens, lease_owner")


def _file(r: Sequence[Any]) -> FileRecord:
    return FileRecord(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), None if r[6] is None else int(r[6]))


def _batch(r: Sequence[Any]) -> BatchRecord:
    times = {name: None if v is None else int(v) for name, v in zip(TIMES, r[14:21], strict=True)}
    total, completed, failed, tin, tout = (int(v) for v in r[21:26])
    return BatchRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], int(r[8]), int(r[9]), r[10], r[11],
                       json.loads(r[12]) if r[12] else None, json.loads(r[13]) if r[13] else None, times,
                       total, completed, failed, tin, tout, r[26])


class BatchStore:
    """The Batch API's queries over one key store (SQLite or PostgreSQL)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def _run(self, fn: Callable[[_Cursor], Any]) -> Any:
        return self.store._run(fn)

    def _x(self, cur: _Cursor, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.store._x(cur, sql, params)

    # -- files ---------------------------------------------------------------------------
    def add_file(self, f: FileRecord) -> None:
        self._run(lambda cur: self._x(cur, f"INSERT INTO llmgw_files ({_FILE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                      (f.id, f.owner, f.purpose, f.filename, f.bytes, f.created_at, f.expires_at)))

    def get_file(self, owner: str, file_id: str) -> FileRecord | None:
        def go(cur: _Cursor) -> FileRecord | None:
            self._x(cur, f"SELECT {_FILE_COLS} FROM llmgw_files WHERE id = ? AND owner = ?", (file_id, owner))
            row = cur.fetchone()
            return None if row is None else _file(row)
        result: FileRecord | None = self._run(go)
        return result

    def list_files(self, owner: str, *, purpose: str | None = None, after: str | None = None, limit: int = 10000,
                   descending: bool = True) -> list[FileRecord]:
        """The owner's files, newest first (or oldest), after the file `after` in that order."""
        def go(cur: _Cursor) -> list[FileRecord]:
            sql = f"SELECT {_FILE_COLS} FROM llmgw_files WHERE owner = ?"
            params: list[Any] = [owner]
            if purpose is not None:
                sql += " AND purpose = ?"
                params.append(purpose)
            if after is not None:
                self._x(cur, "SELECT created_at FROM llmgw_files WHERE id = ? AND owner = ?", (after, owner))
                row = cur.fetchone()
                if row is not None:
                    op = "<" if descending else ">"
                    sql += f" AND (created_at {op} ? OR (created_at = ? AND id {op} ?))"
                    params += [row[0], row[0], after]
            order = "DESC" if descending else "ASC"
            sql += f" ORDER BY created_at {order}, id {order} LIMIT ?"
            params.append(limit)
            self._x(cur, sql, params)
            return [_file(r) for r in cur.fetchall()]
        result: list[FileRecord] = self._run(go)
        return result

    def delete_file(self, owner: str, file_id: str) -> bool:
        """Forget the file (the caller removes its bytes); refused while a batch still reads it."""
        def go(cur: _Cursor) -> bool:
            self._x(cur, "SELECT id FROM llmgw_batches WHERE input_file_id = ? AND status IN (?, ?, ?, ?) "
                         "ORDER BY id LIMIT 1", (file_id, *ACTIVE))
            row = cur.fetchone()
            if row is not None:
                raise BatchConflict(f"file {file_id} is the input of batch {row[0]}, which has not ended",
                                 hint=f"cancel it first: POST /v1/batches/{row[0]}/cancel")
            self._x(cur, "DELETE FROM llmgw_files WHERE id = ? AND owner = ?", (file_id, owner))
            return bool(cur.rowcount)
        result: bool = self._run(go)
        return result

    # -- batches -------------------------------------------------------------------------
    def create_batch(self, b: BatchRecord, lines: Sequence[BatchLine]) -> None:
        """The batch and every one of its requests, pending, in one transaction."""
        def go(cur: _Cursor) -> None:
            self._x(cur, "INSERT INTO llmgw_batches (id, owner, key_id, endpoint, model, input_file_id, "
                         "completion_window, status, created_at, expires_at, metadata, total) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (b.id, b.owner, b.key_id, b.endpoint, b.model, b.input_file_id, b.completion_window, b.status,
                     b.created_at, b.expires_at, json.dumps(b.metadata) if b.metadata is not None else None,
                     len(lines)))
            cur.executemany(self.store._sql(  # type: ignore[attr-defined]
                "INSERT INTO llmgw_batch_requests (batch_id, line, custom_id, start_at, length, state) "
                "VALUES (?, ?, ?, ?, ?, 'pending')"), [(b.id, ln.line, ln.custom_id, ln.start, ln.length)
                                                       for ln in lines])
        self._run(go)

    def get_batch(self, batch_id: str, owner: str | None = None) -> BatchRecord | None:
        """The batch (only if `owner`'s, when given)."""
        def go(cur: _Cursor) -> BatchRecord | None:
            if owner is None:
                self._x(cur, f"SELECT {_BATCH_COLS} FROM llmgw_batches WHERE id = ?", (batch_id,))
            else:
                self._x(cur, f"SELECT {_BATCH_COLS} FROM llmgw_batches WHERE id = ? AND owner = ?",
                        (batch_id, owner))
            row = cur.fetchone()
            return None if row is None else _batch(row)
        result: BatchRecord | None = self._run(go)
        return result

    def list_batches(self, owner: str, *, after: str | None = None, limit: int = 20) -> list[BatchRecord]:
        """The owner's batches, newest first, after the batch `after`."""
        def go(cur: _Cursor) -> list[BatchRecord]:
            sql = f"SELECT {_BATCH_COLS} FROM llmgw_batches WHERE owner = ?"
            params: list[Any] = [owner]
            if after is not None:
                self._x(cur, "SELECT created_at FROM llmgw_batches WHERE id = ? AND owner = ?", (after, owner))
                row = cur.fetchone()
                if row is not None:
                    sql += " AND (created_at < ? OR (created_at = ? AND id < ?))"
                    params += [row[0], row[0], after]
            self._x(cur, sql + " ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit])
            return [_batch(r) for r in cur.fetchall()]
        result: list[BatchRecord] = self._run(go)
        return result

    def cancel_batch(self, owner: str, batch_id: str, now: int) -> BatchRecord | None:
        """Ask for the batch to stop (the runner finishes it off as `cancelled`); None if not the owner's.
        A batch that already ended is refused: there is nothing left to cancel."""
        def go(cur: _Cursor) -> BatchRecord | None:
            self._x(cur, "SELECT status FROM llmgw_batches WHERE id = ? AND owner = ?", (batch_id, owner))
            row = cur.fetchone()
            if row is None:
                return None
            if row[0] in ENDED or row[0] == "finalizing":
                raise BatchConflict(f"cannot cancel batch {batch_id}: its status is {row[0]!r}")
            if row[0] != "cancelling":
                self._x(cur, "UPDATE llmgw_batches SET status = 'cancelling', cancelling_at = ? WHERE id = ?",
                        (now, batch_id))
            self._x(cur, f"SELECT {_BATCH_COLS} FROM llmgw_batches WHERE id = ?", (batch_id,))
            return _batch(cur.fetchone())
        result: BatchRecord | None = self._run(go)
        return result

    # -- running: the lease --------------------------------------------------------------
    def claim(self, runner: str, now: float, ttl: float, skip: Sequence[str] = ()) -> BatchRecord | None:
        """Take the lease of the oldest active batch nobody holds (or whose holder stopped
        renewing), other than `skip` (those this runner runs already)."""
        def go(cur: _Cursor) -> BatchRecord | None:
            self._x(cur, "SELECT id FROM llmgw_batches WHERE status IN (?, ?, ?, ?) AND "
                         "(lease_expires IS NULL OR lease_expires < ?) ORDER BY created_at, id LIMIT 16",
                    (*ACTIVE, now))
            for (batch_id,) in cur.fetchall():
                if batch_id in skip:
                    continue
                # Conditional: of two routers claiming at once, one UPDATE matches.
                self._x(cur, "UPDATE llmgw_batches SET lease_owner = ?, lease_expires = ? WHERE id = ? AND "
                             "(lease_expires IS NULL OR lease_expires < ?)", (runner, now + ttl, batch_id, now))
                if cur.rowcount == 1:
                    self._x(cur, f"SELECT {_BATCH_COLS} FROM llmgw_batches WHERE id = ?", (batch_id,))
                    return _batch(cur.fetchone())
            return None
        result: BatchRecord | None = self._run(go)
        return result

    def renew(self, batch_id: str, runner: str, now: float, ttl: float) -> bool:
        """Extend this runner's lease; False when it is no longer this runner's."""
        def go(cur: _Cursor) -> bool:
            self._x(cur, "UPDATE llmgw_batches SET lease_expires = ? WHERE id = ? AND lease_owner = ? "
                         "AND lease_expires >= ?", (now + ttl, batch_id, runner, now))
            return bool(cur.rowcount == 1)
        result: bool = self._run(go)
        return result

    def release(self, batch_id: str, runner: str) -> None:
        self._run(lambda cur: self._x(cur, "UPDATE llmgw_batches SET lease_owner = NULL, lease_expires = NULL "
                                           "WHERE id = ? AND lease_owner = ?", (batch_id, runner)))

    def set_status(self, batch_id: str, runner: str, status: str, now: int, *, only_from: str) -> bool:
        """Move a batch this runner holds from `only_from` to `status`, stamping its time
        (`<status>_at`); False when it is not in `only_from` (a cancel came first)."""
        stamp = f"{status}_at"
        assert stamp in TIMES, status

        def go(cur: _Cursor) -> bool:
            self._x(cur, f"UPDATE llmgw_batches SET status = ?, {stamp} = COALESCE({stamp}, ?) "
                         "WHERE id = ? AND lease_owner = ? AND status = ?", (status, now, batch_id, runner, only_from))
            return bool(cur.rowcount == 1)
        result: bool = self._run(go)
        return result

    # -- running: the requests -----------------------------------------------------------
    def orphans(self, batch_id: str) -> list[BatchLine]:
        """Requests marked started by a runner that stopped before recording their end."""
        return self._lines(batch_id, "started", None, 1_000_000)

    def pending(self, batch_id: str, now: float, limit: int) -> list[BatchLine]:
        """Requests not sent yet whose retry time (after a refusal) has come, in line order."""
        return self._lines(batch_id, "pending", now, limit)

    def pending_count(self, batch_id: str) -> int:
        def go(cur: _Cursor) -> int:
            self._x(cur, "SELECT COUNT(*) FROM llmgw_batch_requests WHERE batch_id = ? AND state = 'pending'",
                    (batch_id,))
            return int(cur.fetchone()[0])
        result: int = self._run(go)
        return result

    def _lines(self, batch_id: str, state: str, now: float | None, limit: int) -> list[BatchLine]:
        def go(cur: _Cursor) -> list[BatchLine]:
            sql = "SELECT line, custom_id, start_at, length FROM llmgw_batch_requests WHERE batch_id = ? AND state = ?"
            params: list[Any] = [batch_id, state]
            if now is not None:
                sql += " AND not_before <= ?"
                params.append(now)
            self._x(cur, sql + " ORDER BY line LIMIT ?", [*params, limit])
            return [BatchLine(int(r[0]), r[1], int(r[2]), int(r[3])) for r in cur.fetchall()]
        result: list[BatchLine] = self._run(go)
        return result

    def start(self, batch_id: str, line: int, runner: str, now: float) -> bool:
        """Mark the request started before it is sent: only while the lease is this runner's
        and the request is still pending (so it is never sent twice)."""
        def go(cur: _Cursor) -> bool:
            self._x(cur, "UPDATE llmgw_batch_requests SET state = 'started' WHERE batch_id = ? AND line = ? "
                         "AND state = 'pending' AND EXISTS (SELECT 1 FROM llmgw_batches WHERE id = ? AND "
                         "lease_owner = ? AND lease_expires >= ? AND status = 'in_progress')",
                    (batch_id, line, batch_id, runner, now))
            return bool(cur.rowcount == 1)
        result: bool = self._run(go)
        return result

    def unstart(self, batch_id: str, line: int, not_before: float) -> None:
        """The router refused the request before any engine saw it (quota, shed, no replica):
        pending again, not before `not_before`."""
        self._run(lambda cur: self._x(
            cur, "UPDATE llmgw_batch_requests SET state = 'pending', not_before = ? WHERE batch_id = ? AND line = ? "
                 "AND state = 'started'", (not_before, batch_id, line)))

    def finish(self, batch_id: str, lines: Sequence[tuple[int, bool, str, int, int]], *,
               from_state: str = "started") -> None:
        """Record requests' ends: (line, ok, result line, input tokens, output tokens) each,
        with the batch's counts, in one transaction."""
        def go(cur: _Cursor) -> None:
            done = failed = tin = tout = 0
            for line, ok, result, i, o in lines:
                self._x(cur, "UPDATE llmgw_batch_requests SET state = ?, result = ? WHERE batch_id = ? AND line = ? "
                             "AND state = ?", ("done" if ok else "failed", result, batch_id, line, from_state))
                if cur.rowcount == 1:
                    done, failed, tin, tout = done + ok, failed + (not ok), tin + i, tout + o
            self._x(cur, "UPDATE llmgw_batches SET completed = completed + ?, failed = failed + ?, "
                         "input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
                    (done, failed, tin, tout, batch_id))
        self._run(go)

    def results(self, batch_id: str, state: str) -> list[str]:
        """The result lines of the requests in `state` (done: output; failed: errors), in input order."""
        def go(cur: _Cursor) -> list[str]:
            self._x(cur, "SELECT result FROM llmgw_batch_requests WHERE batch_id = ? AND state = ? ORDER BY line",
                    (batch_id, state))
            return [r[0] for r in cur.fetchall()]
        result: list[str] = self._run(go)
        return result

    def complete(self, batch_id: str, runner: str, status: str, now: int, files: Sequence[FileRecord],
                 output_file_id: str | None, error_file_id: str | None) -> bool:
        """End the batch: its output and error files recorded, its status final, its lease
        dropped, in one transaction."""
        stamp = f"{status}_at"
        assert status in ENDED and stamp in TIMES, status

        def go(cur: _Cursor) -> bool:
            self._x(cur, f"UPDATE llmgw_batches SET status = ?, {stamp} = ?, output_file_id = ?, error_file_id = ?, "
                         "lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_owner = ?",
                    (status, now, output_file_id, error_file_id, batch_id, runner))
            if cur.rowcount != 1:
                return False
            for f in files:
                self._x(cur, f"INSERT INTO llmgw_files ({_FILE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (f.id, f.owner, f.purpose, f.filename, f.bytes, f.created_at, f.expires_at))
            return True
        result: bool = self._run(go)
        return result
