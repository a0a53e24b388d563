"""The controller's run history: one record per commit planned, kept beside the state.

A run goes planned -> applying -> applied | failed, or, when its plan destroys something
and policy wants a person, planned -> waiting -> approved -> applying -> ...; a waiting
run is superseded when a newer commit arrives, and a run left `applying` by a controller
that died is marked interrupted by the next leader, which plans the commit again.

Runs live where the state lives: in PostgreSQL (table `llmgw_controller_runs`) beside a
PostgreSQL state, so every controller and `llmgw approve` on any bastion see the same
runs; in a JSON file beside a local state file otherwise.
"""

from __future__ import annotations

import fcntl
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from llmgw.errors import StateError
from llmgw.state import LocalBackend, PostgresBackend, StateBackend
from llmgw.yamlio import atomic_write

RunStatus = Literal["planned", "no-changes", "waiting", "approved", "applying", "applied", "failed",
                    "superseded", "interrupted"]
LOG_KEPT = 16000  # characters of a run's log kept


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Run:
    id: int
    commit: str
    status: RunStatus
    summary: str
    destructive: bool
    created_at: str
    updated_at: str
    plan: str = ""  # the plan's JSON
    log: str = ""
    approved_by: str | None = None
    controller: str = ""

    def as_json(self, with_plan: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_plan:
            data.pop("plan")
        return data


class RunStore(ABC):
    @abstractmethod
    def add(self, commit: str, status: RunStatus, summary: str, destructive: bool, plan: str, controller: str) -> Run:
        """A new run, numbered after the newest."""

    @abstractmethod
    def update(self, run_id: int, **changes: Any) -> Run: ...

    @abstractmethod
    def all(self) -> list[Run]:
        """Every run, newest first."""

    def get(self, run_id: int) -> Run:
        found = next((r for r in self.all() if r.id == run_id), None)
        if found is None:
            raise StateError(f"no controller run {run_id}", hint="`llmgw controller runs` lists them")
        return found

    def approve(self, run_id: int, by: str) -> Run:
        run = self.get(run_id)
        if run.status != "waiting":
            raise StateError(f"run {run_id} is {run.status}, not waiting for approval",
                             hint="only a run whose plan destroys something waits for approval")
        return self.update(run_id, status="approved", approved_by=by)


class FileRuns(RunStore):
    """Runs in a JSON file beside a local state file (one controller on one machine)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _locked(self) -> Iterator[list[Run]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            runs = self._read()
            before = list(runs)
            yield runs
            if runs != before:
                atomic_write(self.path, json.dumps([asdict(r) for r in runs], indent=2) + "\n")
        finally:
            os.close(fd)

    def _read(self) -> list[Run]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read the controller's runs {self.path}: {exc}") from None
        return [Run(**d) for d in data]

    def add(self, commit: str, status: RunStatus, summary: str, destructive: bool, plan: str, controller: str) -> Run:
        with self._locked() as runs:
            run = Run(id=max((r.id for r in runs), default=0) + 1, commit=commit, status=status, summary=summary,
                      destructive=destructive, created_at=_now(), updated_at=_now(), plan=plan,
                      controller=controller)
            runs.append(run)
        return run

    def update(self, run_id: int, **changes: Any) -> Run:
        with self._locked() as runs:
            for i, r in enumerate(runs):
                if r.id == run_id:
                    runs[i] = replace(r, updated_at=_now(), **changes)
                    return runs[i]
        raise StateError(f"no controller run {run_id}")

    def all(self) -> list[Run]:
        return sorted(self._read(), key=lambda r: -r.id)


_PG_SCHEMA = """CREATE TABLE IF NOT EXISTS llmgw_controller_runs (
    id BIGSERIAL PRIMARY KEY,
    commit TEXT NOT NULL,
    status TEXT NOT NULL,
    summary TEXT NOT NULL,
    destructive BOOLEAN NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    plan TEXT NOT NULL,
    log TEXT NOT NULL DEFAULT '',
    approved_by TEXT NULL,
    controller TEXT NOT NULL DEFAULT '')"""
_COLUMNS = "id, commit, status, summary, destructive, created_at, updated_at, plan, log, approved_by, controller"


class PgRuns(RunStore):
    """Runs in the PostgreSQL database that holds the state."""

    def __init__(self, backend: PostgresBackend, *, create: bool = True) -> None:
        self.backend = backend
        with backend.transaction() as cur:  # the backend's connection: one per process
            cur.execute("SELECT to_regclass('llmgw_controller_runs') IS NOT NULL")
            self.exists = bool(cur.fetchone()[0])
            if create and not self.exists:
                cur.execute("SELECT pg_advisory_xact_lock(7340045)")
                cur.execute(_PG_SCHEMA)
                self.exists = True

    def _run(self, row: Any) -> Run:
        return Run(*row)

    def add(self, commit: str, status: RunStatus, summary: str, destructive: bool, plan: str, controller: str) -> Run:
        with self.backend.transaction() as cur:
            cur.execute(f"INSERT INTO llmgw_controller_runs (commit, status, summary, destructive, created_at, "
                        f"updated_at, plan, controller) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
                        (commit, status, summary, destructive, _now(), _now(), plan, controller))
            return self._run(cur.fetchone())

    def update(self, run_id: int, **changes: Any) -> Run:
        allowed = {"status", "summary", "log", "approved_by", "controller"}
        if not set(changes) <= allowed:
            raise ValueError(f"cannot change {sorted(set(changes) - allowed)}")
        sets = ", ".join(f"{k} = %s" for k in changes)
        with self.backend.transaction() as cur:
            cur.execute(f"UPDATE llmgw_controller_runs SET {sets}, updated_at = %s WHERE id = %s RETURNING {_COLUMNS}",
                        (*changes.values(), _now(), run_id))
            row = cur.fetchone()
        if row is None:
            raise StateError(f"no controller run {run_id}")
        return self._run(row)

    def all(self) -> list[Run]:
        if not self.exists:
            return []  # no controller ever ran against this state
        with self.backend.transaction() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM llmgw_controller_runs ORDER BY id DESC LIMIT 500")
            return [self._run(r) for r in cur.fetchall()]

    def approve(self, run_id: int, by: str) -> Run:
        with self.backend.transaction() as cur:  # compare-and-set: two approvers, one approval
            cur.execute(f"UPDATE llmgw_controller_runs SET status = 'approved', approved_by = %s, updated_at = %s "
                        f"WHERE id = %s AND status = 'waiting' RETURNING {_COLUMNS}", (by, _now(), run_id))
            row = cur.fetchone()
        if row is None:
            return super().approve(run_id, by)  # says why not
        return self._run(row)


def runs_for(backend: StateBackend, *, create: bool = True) -> RunStore:
    """The runs kept beside `backend`'s state; `create=False` only reads (nothing is created)."""
    if isinstance(backend, PostgresBackend):
        return PgRuns(backend, create=create)
    if isinstance(backend, LocalBackend):
        return FileRuns(backend.path.with_name(backend.path.name + ".runs.json"))
    raise StateError(f"the controller cannot keep runs beside {backend.where}")
