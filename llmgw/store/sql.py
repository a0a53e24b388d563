"""The key store in SQL, one implementation for SQLite and PostgreSQL.

Both dialects share the schema and every query (plain SQL with `ON CONFLICT` upserts
and a partial unique index, which both understand); a backend only supplies the
connection and its parameter style. The store is synchronous: the CLI calls it
directly, and the router calls it from a worker thread, off the request path.

Tables (prefixed `llmgw_` so the store can share a database):

    llmgw_meta             schema version
    llmgw_groups           name, parent, rpm, tokens_per_day; share, priority, may_choose_priority
    llmgw_keys             id, name (unique among active keys), group, prefix, sha256
    llmgw_usage_daily      per key, UTC day and model: requests, prompt/completion tokens
    llmgw_requests_minute  per key and clock minute: requests (shared rpm; pruned)
    llmgw_reservations     tokens held by requests in flight (token quotas), until settled
    llmgw_bench_results    one row per `llmgw bench` run: model, profiles, engine version, nodes, figures
    llmgw_check_results    one row per capability per `llmgw check` run (and apply's checks): pass/fail
    llmgw_files            Batch API files: owner (group or key), purpose, name, size (bytes on disk)
    llmgw_batches          Batch API batches: status, times, counts, usage, the running router's lease
    llmgw_batch_requests   one row per input line of a batch: pending/started/done/failed, its result line

Quotas are admitted in the store (`admit`), one transaction per request of a key under
a limit, serialised per group (PostgreSQL: an advisory lock per limited group, taken in
name order; SQLite: the write lock), so several routers on one store cannot together
admit more than a limit: each sees what the others admitted and reserved.

Why long: the schema and every query for both dialects in one place, so SQLite and
PostgreSQL cannot drift apart.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from llmgw.errors import StoreError
from llmgw.store.keys import hash_key, is_key, new_key, new_key_id, shown_prefix
from llmgw.store.model import (
    PRIORITIES,
    BenchRecord,
    CheckRecord,
    GroupLimit,
    GroupRecord,
    KeyRecord,
    MinuteCount,
    Priority,
    Refusal,
    UsageDelta,
    UsageRow,
)
from llmgw.store.urls import postgres_url_problem, redact_url, scrub

SCHEMA_VERSION = 4  # 2: llmgw_reservations; 3: llmgw_bench_results, llmgw_check_results; 4: batches

# The Batch API (llmgw/store/batches.py): files, batches, and each batch's requests.
# Times are epoch seconds (OpenAI's shape); `lease_*` is the router running the batch.
_BATCH_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS llmgw_files (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        purpose TEXT NOT NULL,
        filename TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NULL)""",
    "CREATE INDEX IF NOT EXISTS llmgw_files_owner ON llmgw_files (owner, created_at)",
    """CREATE TABLE IF NOT EXISTS llmgw_batches (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        key_id TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        model TEXT NULL,
        input_file_id TEXT NOT NULL,
        completion_window TEXT NOT NULL,
        status TEXT NOT NULL,
        output_file_id TEXT NULL,
        error_file_id TEXT NULL,
        errors TEXT NULL,
        metadata TEXT NULL,
        created_at BIGINT NOT NULL,
        in_progress_at BIGINT NULL,
        expires_at BIGINT NOT NULL,
        finalizing_at BIGINT NULL,
        completed_at BIGINT NULL,
        failed_at BIGINT NULL,
        expired_at BIGINT NULL,
        cancelling_at BIGINT NULL,
        cancelled_at BIGINT NULL,
        total BIGINT NOT NULL DEFAULT 0,
        completed BIGINT NOT NULL DEFAULT 0,
        failed BIGINT NOT NULL DEFAULT 0,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        lease_owner TEXT NULL,
        lease_expires DOUBLE PRECISION NULL)""",
    "CREATE INDEX IF NOT EXISTS llmgw_batches_owner ON llmgw_batches (owner, created_at)",
    "CREATE INDEX IF NOT EXISTS llmgw_batches_status ON llmgw_batches (status)",
    """CREATE TABLE IF NOT EXISTS llmgw_batch_requests (
        batch_id TEXT NOT NULL,
        line BIGINT NOT NULL,
        custom_id TEXT NOT NULL,
        start_at BIGINT NOT NULL,
        length BIGINT NOT NULL,
        state TEXT NOT NULL,
        not_before DOUBLE PRECISION NOT NULL DEFAULT 0,
        result TEXT NULL,
        PRIMARY KEY (batch_id, line))""",
    "CREATE INDEX IF NOT EXISTS llmgw_batch_requests_state ON llmgw_batch_requests (batch_id, state, line)",
]

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS llmgw_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS llmgw_groups (
        name TEXT PRIMARY KEY,
        parent TEXT NULL REFERENCES llmgw_groups(name),
        rpm BIGINT NULL,
        tokens_per_day BIGINT NULL,
        created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS llmgw_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        group_name TEXT NULL REFERENCES llmgw_groups(name),
        prefix TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL,
        revoked_at TEXT NULL)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS llmgw_keys_active_name ON llmgw_keys (name) "
    "WHERE revoked_at IS NULL",
    """CREATE TABLE IF NOT EXISTS llmgw_usage_daily (
        key_id TEXT NOT NULL,
        day TEXT NOT NULL,
        model TEXT NOT NULL,
        requests BIGINT NOT NULL DEFAULT 0,
        prompt_tokens BIGINT NOT NULL DEFAULT 0,
        completion_tokens BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (key_id, day, model))""",
    """CREATE TABLE IF NOT EXISTS llmgw_requests_minute (
        key_id TEXT NOT NULL,
        minute BIGINT NOT NULL,
        requests BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (key_id, minute))""",
    """CREATE TABLE IF NOT EXISTS llmgw_reservations (
        id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        tokens BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS llmgw_reservations_key ON llmgw_reservations (key_id)",
    """CREATE TABLE IF NOT EXISTS llmgw_bench_results (
        id TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        profiles TEXT NOT NULL,
        engine TEXT NOT NULL,
        engine_version TEXT NOT NULL,
        nodes TEXT NOT NULL,
        created_at TEXT NOT NULL,
        concurrency BIGINT NOT NULL,
        requests BIGINT NOT NULL,
        errors BIGINT NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        max_tokens BIGINT NOT NULL,
        duration_s DOUBLE PRECISION NOT NULL,
        output_tokens_per_s DOUBLE PRECISION NOT NULL,
        ttft_p50_ms DOUBLE PRECISION NULL,
        ttft_p90_ms DOUBLE PRECISION NULL,
        itl_p50_ms DOUBLE PRECISION NULL,
        itl_p90_ms DOUBLE PRECISION NULL)""",
    "CREATE INDEX IF NOT EXISTS llmgw_bench_results_model ON llmgw_bench_results (model, created_at)",
    """CREATE TABLE IF NOT EXISTS llmgw_check_results (
        run_id TEXT NOT NULL,
        capability TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        detail TEXT NOT NULL,
        profiles TEXT NOT NULL,
        engine TEXT NOT NULL,
        engine_version TEXT NOT NULL,
        nodes TEXT NOT NULL,
        replica TEXT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (run_id, capability))""",
    "CREATE INDEX IF NOT EXISTS llmgw_check_results_model ON llmgw_check_results (model, created_at)",
    *_BATCH_SCHEMA,
]

# Admission settings of a group (router/admission.py), added to llmgw_groups by `_migrate`
# on stores made before them (no schema version change: an older llmgw reads the table as
# before, naming its own columns). NULL: inherited from the parent group.
_GROUP_ADMISSION_COLUMNS = (("share", "DOUBLE PRECISION NULL"), ("priority", "TEXT NULL"),
                            ("may_choose_priority", "INTEGER NULL"))
_GROUP_COLUMNS = "name, parent, rpm, tokens_per_day, created_at, share, priority, may_choose_priority"
_MAX_SHARE = 1e6


def _group(r: Sequence[Any]) -> GroupRecord:
    return GroupRecord(r[0], r[1], r[2], r[3], datetime.fromisoformat(r[4]), share=r[5], priority=r[6],
                       may_choose_priority=None if r[7] is None else bool(r[7]))


# One group's standing, read in ONE statement so it is one snapshot: a usage flush that
# commits between two reads would otherwise show its tokens neither as used nor as reserved.
_GROUP_STANDING = """
WITH RECURSIVE sub(name) AS (
    SELECT CAST(? AS TEXT)
    UNION SELECT g.name FROM llmgw_groups g JOIN sub ON g.parent = sub.name),
ks AS (SELECT id FROM llmgw_keys WHERE group_name IN (SELECT name FROM sub))
SELECT
    (SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM llmgw_usage_daily
     WHERE day = ? AND key_id IN (SELECT id FROM ks)),
    (SELECT COALESCE(SUM(tokens), 0) FROM llmgw_reservations
     WHERE expires_at > ? AND key_id IN (SELECT id FROM ks)),
    (SELECT COALESCE(SUM(requests), 0) FROM llmgw_requests_minute
     WHERE minute = ? AND key_id IN (SELECT id FROM ks)),
    (SELECT COALESCE(SUM(requests), 0) FROM llmgw_requests_minute
     WHERE minute = ? AND key_id IN (SELECT id FROM ks))
"""

# Minute counters older than this are deleted when usage is written.
MINUTE_RETENTION = 10


class Unset:
    """Marks an argument that was not given (None means "clear the limit")."""


UNSET = Unset()


class _Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...
    @property
    def rowcount(self) -> int: ...


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class SqlStore:
    """Keys, groups, quotas and usage. Thread-safe: one connection behind a lock."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._connect()
        self._migrate()

    # -- backend hooks -------------------------------------------------------------------
    def _connect(self) -> None:
        raise NotImplementedError

    @contextmanager
    def _tx(self) -> Iterator[_Cursor]:
        """A cursor inside one transaction, committed on success."""
        raise NotImplementedError
        yield  # pragma: no cover

    def _sql(self, sql: str) -> str:
        return sql

    def _migrate_lock(self, cur: _Cursor) -> None:
        """Serialise schema creation between processes (PostgreSQL races on CREATE)."""

    def _group_locks(self, cur: _Cursor, groups: Sequence[str]) -> None:
        """Serialise admissions per group between routers (taken in the order given)."""

    def _columns(self, cur: _Cursor, table: str) -> set[str]:
        """The column names `table` has (PostgreSQL's information schema; SQLite overrides)."""
        self._x(cur, "SELECT column_name FROM information_schema.columns "
                     "WHERE table_schema = current_schema() AND table_name = ?", (table,))
        return {str(r[0]) for r in cur.fetchall()}

    def close(self) -> None:
        raise NotImplementedError

    # -- plumbing ------------------------------------------------------------------------
    def _run(self, fn: Callable[[_Cursor], Any]) -> Any:
        with self._lock, self._tx() as cur:
            return fn(cur)

    def _x(self, cur: _Cursor, sql: str, params: Sequence[Any] = ()) -> Any:
        return cur.execute(self._sql(sql), params)

    def _migrate(self) -> None:
        def go(cur: _Cursor) -> None:
            self._migrate_lock(cur)
            for stmt in _SCHEMA:
                self._x(cur, stmt)
            have = self._columns(cur, "llmgw_groups")
            for column, kind in _GROUP_ADMISSION_COLUMNS:
                if column not in have:
                    self._x(cur, f"ALTER TABLE llmgw_groups ADD COLUMN {column} {kind}")
            self._x(cur, "SELECT value FROM llmgw_meta WHERE key = 'schema_version'")
            row = cur.fetchone()
            if row is None:
                self._x(cur, "INSERT INTO llmgw_meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(f"the store {self.redacted_url} has schema version {row[0]}, "
                                 f"newer than this llmgw understands ({SCHEMA_VERSION})",
                                 hint="upgrade llmgw on this host")
            elif int(row[0]) < SCHEMA_VERSION:  # the CREATE ... IF NOT EXISTS above added what is new
                self._x(cur, "UPDATE llmgw_meta SET value = ? WHERE key = 'schema_version'",
                        (str(SCHEMA_VERSION),))
        self._run(go)

    @property
    def redacted_url(self) -> str:
        """The URL without a password, for messages."""
        return redact_url(self.url)

    # -- groups --------------------------------------------------------------------------
    def list_groups(self) -> list[GroupRecord]:
        def go(cur: _Cursor) -> list[GroupRecord]:
            self._x(cur, f"SELECT {_GROUP_COLUMNS} FROM llmgw_groups ORDER BY name")
            return [_group(r) for r in cur.fetchall()]
        result: list[GroupRecord] = self._run(go)
        return result

    def set_group(self, name: str, *, parent: str | Unset | None = UNSET,
                  rpm: int | Unset | None = UNSET,
                  tokens_per_day: int | Unset | None = UNSET, share: float | Unset | None = UNSET,
                  priority: Priority | Unset | None = UNSET,
                  may_choose_priority: bool | Unset | None = UNSET) -> GroupRecord:
        """Create the group or change the given fields; refuse a parent that makes a loop."""
        if not name or name.strip() != name:
            raise StoreError(f"invalid group name {name!r}", hint="use a non-empty name without spaces")
        if isinstance(share, (int, float)) and not (math.isfinite(share) and 0 < share <= _MAX_SHARE):
            raise StoreError(f"share must be a number above 0 and at most {_MAX_SHARE:g}, not {share}",
                             hint="shares are relative weights: 1 for every group is an equal split")
        if isinstance(priority, str) and priority not in PRIORITIES:
            raise StoreError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")

        def go(cur: _Cursor) -> GroupRecord:
            self._x(cur, f"SELECT {_GROUP_COLUMNS} FROM llmgw_groups")
            existing = {r[0]: _group(r) for r in cur.fetchall()}
            old = existing.get(name)
            new_parent = (old.parent if old else None) if isinstance(parent, Unset) else parent
            new_rpm = (old.rpm if old else None) if isinstance(rpm, Unset) else rpm
            new_tpd = ((old.tokens_per_day if old else None) if isinstance(tokens_per_day, Unset)
                       else tokens_per_day)
            if new_parent is not None:
                if new_parent not in existing:
                    raise StoreError(f"no group {new_parent!r} to be the parent of {name!r}",
                                     hint=f"create it first: llmgw keys group set {new_parent}")
                seen: set[str] = {name}
                node: str | None = new_parent
                while node is not None:
                    if node in seen:
                        raise StoreError(f"group {name!r} cannot have parent {new_parent!r}: "
                                         f"that makes a loop", hint="choose a parent outside its subtree")
                    seen.add(node)
                    node = existing[node].parent
            new_share = (old.share if old else None) if isinstance(share, Unset) else share
            new_priority = (old.priority if old else None) if isinstance(priority, Unset) else priority
            new_choose = ((old.may_choose_priority if old else None) if isinstance(may_choose_priority, Unset)
                          else may_choose_priority)
            admission = (new_share, new_priority, None if new_choose is None else int(new_choose))
            for label, value in (("rpm", new_rpm), ("tokens per day", new_tpd)):
                if value is not None and value < 0:
                    raise StoreError(f"{label} must be zero or more, not {value}")
            if old is None:
                created = _now()
                self._x(cur, f"INSERT INTO llmgw_groups ({_GROUP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (name, new_parent, new_rpm, new_tpd, created.isoformat(), *admission))
            else:
                created = old.created_at
                self._x(cur, "UPDATE llmgw_groups SET parent = ?, rpm = ?, tokens_per_day = ?, share = ?, "
                             "priority = ?, may_choose_priority = ? WHERE name = ?",
                        (new_parent, new_rpm, new_tpd, *admission, name))
            return GroupRecord(name, new_parent, new_rpm, new_tpd, created, share=new_share,
                               priority=new_priority, may_choose_priority=new_choose)
        result: GroupRecord = self._run(go)
        return result

    def delete_group(self, name: str) -> None:
        def go(cur: _Cursor) -> None:
            self._x(cur, "SELECT 1 FROM llmgw_groups WHERE name = ?", (name,))
            if cur.fetchone() is None:
                raise StoreError(f"no group {name!r}", hint="see `llmgw keys group list`")
            self._x(cur, "SELECT name FROM llmgw_groups WHERE parent = ? ORDER BY name", (name,))
            children = [r[0] for r in cur.fetchall()]
            self._x(cur, "SELECT name FROM llmgw_keys WHERE group_name = ? AND revoked_at IS NULL "
                         "ORDER BY name", (name,))
            keys = [r[0] for r in cur.fetchall()]
            if children or keys:
                users = [f"group {c}" for c in children] + [f"key {k}" for k in keys]
                raise StoreError(f"group {name!r} is still used by {', '.join(users)}",
                                 hint="move or revoke those first")
            self._x(cur, "UPDATE llmgw_keys SET group_name = NULL WHERE group_name = ?", (name,))
            self._x(cur, "DELETE FROM llmgw_groups WHERE name = ?", (name,))
        self._run(go)

    # -- keys ----------------------------------------------------------------------------
    def create_key(self, name: str, group: str | None = None, *, secret: str | None = None) -> tuple[KeyRecord, str]:
        """A new key; the secret is returned once and only its hash is kept. `secret`: one made
        elsewhere by `new_key` (`llmgw keys create` on the bastion, stored on a router host)."""
        if not name or name.strip() != name:
            raise StoreError(f"invalid key name {name!r}", hint="use a non-empty name without spaces")
        if secret is not None and not is_key(secret):
            raise StoreError("the key given is not one llmgw made (sk-llmgw- and 43 URL-safe characters)")
        secret = secret or new_key()
        record = KeyRecord(id=new_key_id(), name=name, group=group, prefix=shown_prefix(secret),
                           hash=hash_key(secret), created_at=_now())

        def go(cur: _Cursor) -> None:
            if group is not None:
                self._x(cur, "SELECT 1 FROM llmgw_groups WHERE name = ?", (group,))
                if cur.fetchone() is None:
                    raise StoreError(f"no group {group!r}",
                                     hint=f"create it first: llmgw keys group set {group}")
            self._x(cur, "SELECT 1 FROM llmgw_keys WHERE name = ? AND revoked_at IS NULL", (name,))
            if cur.fetchone() is not None:
                raise StoreError(f"an active key named {name!r} exists",
                                 hint="choose another name, or revoke that key first")
            self._x(cur, "INSERT INTO llmgw_keys (id, name, group_name, prefix, hash, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?)",
                    (record.id, record.name, record.group, record.prefix, record.hash,
                     record.created_at.isoformat()))
        self._run(go)
        return record, secret

    def list_keys(self, *, include_revoked: bool = False) -> list[KeyRecord]:
        def go(cur: _Cursor) -> list[KeyRecord]:
            where = "" if include_revoked else " WHERE revoked_at IS NULL"
            self._x(cur, "SELECT id, name, group_name, prefix, hash, created_at, revoked_at "
                         f"FROM llmgw_keys{where} ORDER BY name, created_at")
            return [KeyRecord(r[0], r[1], r[2], r[3], r[4], datetime.fromisoformat(r[5]), _ts(r[6]))
                    for r in cur.fetchall()]
        result: list[KeyRecord] = self._run(go)
        return result

    def revoke_key(self, ident: str) -> KeyRecord:
        """Revoke the active key with this name or id."""
        def go(cur: _Cursor) -> KeyRecord:
            self._x(cur, "SELECT id, name, group_name, prefix, hash, created_at FROM llmgw_keys "
                         "WHERE revoked_at IS NULL AND (name = ? OR id = ?)", (ident, ident))
            rows = cur.fetchall()
            if not rows:
                raise StoreError(f"no active key named {ident!r} (or with that id)",
                                 hint="see `llmgw keys list`")
            if len(rows) > 1:
                raise StoreError(f"{ident!r} names more than one key", hint="revoke it by its id")
            r = rows[0]
            when = _now()
            self._x(cur, "UPDATE llmgw_keys SET revoked_at = ? WHERE id = ?", (when.isoformat(), r[0]))
            return KeyRecord(r[0], r[1], r[2], r[3], r[4], datetime.fromisoformat(r[5]), when)
        result: KeyRecord = self._run(go)
        return result

    # -- usage ---------------------------------------------------------------------------
    def add_usage(self, deltas: Iterable[UsageDelta], minutes: Iterable[MinuteCount],
                  released: Iterable[str] = (), *, now: float | None = None) -> None:
        """Add one batch of counters (the router calls this about once a second) and drop
        the reservations of the requests they settle, in one transaction: a request's
        tokens move from reserved to used at once, never counted twice or not at all."""
        deltas, minutes, released = list(deltas), list(minutes), list(released)
        if not deltas and not minutes and not released:
            return
        self._run(lambda cur: self._add_usage(cur, deltas, minutes, released, now))

    def _add_usage(self, cur: _Cursor, deltas: list[UsageDelta], minutes: list[MinuteCount],
                   released: list[str], now: float | None) -> None:
        for rid in released:
            self._x(cur, "DELETE FROM llmgw_reservations WHERE id = ?", (rid,))
        if released and now is not None:  # and those whose router died before settling them
            self._x(cur, "DELETE FROM llmgw_reservations WHERE expires_at < ?", (now,))
        for d in deltas:
            self._x(cur, "INSERT INTO llmgw_usage_daily AS u (key_id, day, model, requests, "
                         "prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?) "
                         "ON CONFLICT (key_id, day, model) DO UPDATE SET "
                         "requests = u.requests + excluded.requests, "
                         "prompt_tokens = u.prompt_tokens + excluded.prompt_tokens, "
                         "completion_tokens = u.completion_tokens + excluded.completion_tokens",
                    (d.key_id, d.day, d.model, d.requests, d.prompt_tokens, d.completion_tokens))
        newest = 0
        for m in minutes:
            newest = max(newest, m.minute)
            self._x(cur, "INSERT INTO llmgw_requests_minute AS m (key_id, minute, requests) "
                         "VALUES (?, ?, ?) ON CONFLICT (key_id, minute) DO UPDATE SET "
                         "requests = m.requests + excluded.requests",
                    (m.key_id, m.minute, m.requests))
        if newest:
            self._x(cur, "DELETE FROM llmgw_requests_minute WHERE minute < ?",
                    (newest - MINUTE_RETENTION,))

    def usage(self, day: str | None = None) -> list[UsageRow]:
        """Usage rows for one UTC day (YYYY-MM-DD), or for every day when None."""
        def go(cur: _Cursor) -> list[UsageRow]:
            cols = "key_id, day, model, requests, prompt_tokens, completion_tokens"
            if day is None:
                self._x(cur, f"SELECT {cols} FROM llmgw_usage_daily ORDER BY day, key_id, model")
            else:
                self._x(cur, f"SELECT {cols} FROM llmgw_usage_daily WHERE day = ? "
                             "ORDER BY key_id, model", (day,))
            return [UsageRow(r[0], r[1], r[2], int(r[3]), int(r[4]), int(r[5]))
                    for r in cur.fetchall()]
        result: list[UsageRow] = self._run(go)
        return result

    # -- quotas --------------------------------------------------------------------------
    def admit(self, key_id: str, limits: Sequence[GroupLimit], *, now: float, day: str,
              reserve: int, reservation_id: str, expires_at: float, fit: int = 0,
              usage: tuple[list[UsageDelta], list[MinuteCount], list[str]] = ([], [], [])) -> Refusal | None:
        """Admit one request of `key_id` under its groups' `limits`, or say which refuses.

        Admitted, the request is counted in its minute at once (for every router's rpm)
        and, under a token limit, `reserve` tokens are held for it until `add_usage`
        releases `reservation_id` with its real usage (or `expires_at` passes). `fit`
        (at most `reserve`: the request's prompt, as quotas.py bounds it) must fit under
        each token limit beside what is used and reserved; the rest of `reserve` (the
        completion budget) may pass it. With fit 0 a limit refuses once used + reserved
        reaches it. Either way the last request admitted takes a group past its limit by
        at most what it may cost beyond `fit`, however many routers admit at once.
        `usage` is the router's unwritten batch (as for `add_usage`), written first in
        the same transaction: what this router settled a moment ago no longer counts as
        reserved.
        """
        minute = int(now // 60)
        inside = 1.0 - (now - minute * 60) / 60.0  # how much of the previous minute is still in the window

        def go(cur: _Cursor) -> Refusal | None:
            self._group_locks(cur, sorted({g.name for g in limits}))
            self._add_usage(cur, *usage, now)
            for g in limits:
                self._x(cur, _GROUP_STANDING, (g.name, day, now, minute, minute - 1))
                used, reserved, this_minute, last_minute = (int(v) for v in cur.fetchone())
                if g.rpm is not None and this_minute + last_minute * inside + 1 > g.rpm:
                    return Refusal(g.name, "rpm", g.rpm)
                if g.tokens_per_day is not None and used + reserved + max(fit, 1) > g.tokens_per_day:
                    return Refusal(g.name, "tokens", g.tokens_per_day)
            self._x(cur, "INSERT INTO llmgw_requests_minute AS m (key_id, minute, requests) VALUES (?, ?, 1) "
                         "ON CONFLICT (key_id, minute) DO UPDATE SET requests = m.requests + 1",
                    (key_id, minute))
            if any(g.tokens_per_day is not None for g in limits):
                self._x(cur, "INSERT INTO llmgw_reservations (id, key_id, tokens, expires_at) VALUES (?, ?, ?, ?)",
                        (reservation_id, key_id, max(0, reserve), expires_at))
            return None
        result: Refusal | None = self._run(go)
        return result

    def reserved_tokens(self, now: float) -> int:
        """Tokens held by unsettled, unexpired reservations (all keys)."""
        def go(cur: _Cursor) -> int:
            self._x(cur, "SELECT COALESCE(SUM(tokens), 0) FROM llmgw_reservations WHERE expires_at > ?", (now,))
            return int(cur.fetchone()[0])
        result: int = self._run(go)
        return result

    def minute_requests(self, since_minute: int) -> list[MinuteCount]:
        def go(cur: _Cursor) -> list[MinuteCount]:
            self._x(cur, "SELECT key_id, minute, requests FROM llmgw_requests_minute "
                         "WHERE minute >= ?", (since_minute,))
            return [MinuteCount(r[0], int(r[1]), int(r[2])) for r in cur.fetchall()]
        result: list[MinuteCount] = self._run(go)
        return result

    # -- bench and check results ---------------------------------------------------------
    _BENCH_COLS = ("id, model, profiles, engine, engine_version, nodes, created_at, concurrency, requests, errors, "
                   "prompt_tokens, max_tokens, duration_s, output_tokens_per_s, ttft_p50_ms, ttft_p90_ms, "
                   "itl_p50_ms, itl_p90_ms")
    _CHECK_COLS = ("run_id, model, capability, status, detail, profiles, engine, engine_version, nodes, "
                   "created_at, replica")

    def add_bench(self, r: BenchRecord) -> None:
        self._run(lambda cur: self._x(
            cur, f"INSERT INTO llmgw_bench_results ({self._BENCH_COLS}) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (r.id, r.model, r.profiles, r.engine, r.engine_version, r.nodes, r.created_at.isoformat(),
             r.concurrency, r.requests, r.errors, r.prompt_tokens, r.max_tokens, r.duration_s,
             r.output_tokens_per_s, r.ttft_p50_ms, r.ttft_p90_ms, r.itl_p50_ms, r.itl_p90_ms)))

    def bench_results(self, model: str, limit: int = 20) -> list[BenchRecord]:
        """The model's newest bench runs first."""
        def go(cur: _Cursor) -> list[BenchRecord]:
            self._x(cur, f"SELECT {self._BENCH_COLS} FROM llmgw_bench_results WHERE model = ? "
                         "ORDER BY created_at DESC, id LIMIT ?", (model, limit))
            return [BenchRecord(r[0], r[1], r[2], r[3], r[4], r[5], datetime.fromisoformat(r[6]), int(r[7]),
                                int(r[8]), int(r[9]), int(r[10]), int(r[11]), float(r[12]), float(r[13]),
                                *(None if v is None else float(v) for v in r[14:18]))
                    for r in cur.fetchall()]
        result: list[BenchRecord] = self._run(go)
        return result

    def add_checks(self, records: Sequence[CheckRecord]) -> None:
        """One run's checks, in one transaction (a run is stored whole or not at all)."""
        def go(cur: _Cursor) -> None:
            for r in records:
                self._x(cur, f"INSERT INTO llmgw_check_results ({self._CHECK_COLS}) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (r.run_id, r.model, r.capability, r.status, r.detail, r.profiles, r.engine,
                         r.engine_version, r.nodes, r.created_at.isoformat(), r.replica))
        self._run(go)

    def check_results(self, model: str, runs: int = 5) -> list[CheckRecord]:
        """The checks of the model's newest `runs` runs, newest run first."""
        def go(cur: _Cursor) -> list[CheckRecord]:
            self._x(cur, f"SELECT {self._CHECK_COLS} FROM llmgw_check_results WHERE model = ? AND run_id IN ("
                         "SELECT run_id FROM llmgw_check_results WHERE model = ? GROUP BY run_id "
                         "ORDER BY MAX(created_at) DESC, run_id LIMIT ?) ORDER BY created_at DESC, run_id, capability",
                    (model, model, runs))
            return [CheckRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8],
                                datetime.fromisoformat(r[9]), r[10]) for r in cur.fetchall()]
        result: list[CheckRecord] = self._run(go)
        return result


class SqliteStore(SqlStore):
    """The embedded default: one file, WAL mode so the CLI and a router can share it."""

    def __init__(self, url: str, path: Path) -> None:
        self.path = path
        super().__init__(url)

    def _connect(self) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Created owner-only before SQLite opens it (its -wal and -shm files take the
            # database file's mode): key hashes and usage are nobody else's business.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                       timeout=10.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}",
                             hint="check the path and its permissions, or pass --store URL") from None

    @contextmanager
    def _tx(self) -> Iterator[_Cursor]:
        cur = self._db.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            yield cur
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise StoreError(f"store {self.path}: {exc}") from None
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        finally:
            cur.close()

    def close(self) -> None:
        self._db.close()

    def _columns(self, cur: _Cursor, table: str) -> set[str]:
        self._x(cur, f"PRAGMA table_info({table})")
        return {str(r[1]) for r in cur.fetchall()}


class PostgresStore(SqlStore):
    """Several routers share keys, quotas and usage through one PostgreSQL database."""

    def _connect(self) -> None:
        import psycopg

        problem = postgres_url_problem(self.url)
        if problem is not None:
            raise StoreError(f"cannot use the store URL {self.redacted_url}: {problem}",
                             hint="write postgresql://USER:PASSWORD@HOST:PORT/DATABASE, percent-encoding "
                                  "special characters in the password")
        try:
            self._db = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the store {self.redacted_url}: "
                             f"{scrub('; '.join(ln.strip() for ln in str(exc).splitlines() if ln.strip()), self.url)}",
                             hint="check that PostgreSQL runs and the URL, user and password are right"
                             ) from None

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def _migrate_lock(self, cur: _Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(7340043)")

    def _group_locks(self, cur: _Cursor, groups: Sequence[str]) -> None:
        # (class, hash of the name): held to the end of the transaction. Name order on
        # every router, so two admissions never wait for each other's locks in a cycle.
        for name in groups:
            cur.execute("SELECT pg_advisory_xact_lock(7340044, hashtext(%s))", (name,))

    @contextmanager
    def _tx(self) -> Iterator[_Cursor]:
        import psycopg

        if self._db.closed or self._db.broken:
            self._connect()
        try:
            with self._db.transaction(), self._db.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            raise StoreError(f"store {self.redacted_url}: "
                             f"{scrub(str(exc).strip().splitlines()[0], self.url)}") from None

    def close(self) -> None:
        self._db.close()
