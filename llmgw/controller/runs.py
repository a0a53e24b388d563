"""The controller's run history: one record per commit planned, kept beside the state.

A run goes planned -> applying -> applied | failed, or, when its plan destroys something
and policy wants a person, planned -> waiting -> approved -> applying -> ...; a waiting
run is superseded when a newer commit arrives, and a run left `applying` by a controller
that died is marked interrupted by the next leader, which plans the commit again.

Runs live where the state lives: in PostgreSQL (table `llmgw_controller_runs`) beside a
PostgreSQL state, so every controller and `llmgw approve` on any bastion see the same
runs; in a JSON file beside a local state file otherwise (both in the controller's runtime
folder, never its work tree: llmgw.controller.checkout).

A run is bound to what it was planned from: the full commit hash and the sha256 of its plan's
JSON (`plan_sha256`), and sealed (`seal`: an HMAC of id, commit, digest and controller under a
key derived from the site's engine key secret, which only the fleet's controllers hold). A
record whose digest or seal does not verify (edited in the store, or inserted by someone who
can write the store but is not a controller) is never approved or applied (`untrusted`).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from llmgw.apply.engine_keys import EngineKeyring
from llmgw.errors import StateError
from llmgw.state import Database, FileBacked, StateBackend, offers
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
    plan_sha256: str = ""  # of `plan`, recorded when planned
    seal: str = ""  # RunSeal.of(this run), recorded when planned

    def as_json(self, with_plan: bool = False) -> dict[str, Any]:
        data = asdict(self)
        data.pop("seal")
        if not with_plan:
            data.pop("plan")
        return data


def plan_digest(plan: str) -> str:
    return hashlib.sha256(plan.encode()).hexdigest()


def digest_problem(run: Run) -> str | None:
    """Why `run`'s plan is not the one it was planned with (its recorded digest), or None."""
    if run.plan_sha256 and hmac.compare_digest(plan_digest(run.plan), run.plan_sha256):
        return None
    return (f"run {run.id}'s plan does not match the digest recorded when it was planned "
            f"({run.plan_sha256[:12] or 'none'}): it was changed in the runs store")


class RunSeal:
    """Seals the runs a controller plans: only a holder of the site's engine key secret can."""

    _NAME = ":controller-run-seal"  # not a replica id (never a colon in one): no engine key equals it

    def __init__(self, keyring: EngineKeyring) -> None:
        self.keyring = keyring

    def of(self, run_id: int, commit: str, plan_sha256: str, controller: str) -> str:
        message = "\0".join((str(run_id), commit, plan_sha256, controller)).encode()
        return hmac.new(self.keyring.key(self._NAME).encode(), message, hashlib.sha256).hexdigest()

    def untrusted(self, run: Run) -> str | None:
        """Why `run` must not be approved or applied, or None."""
        why = digest_problem(run)
        if why is not None:
            return why
        if not hmac.compare_digest(self.of(run.id, run.commit, run.plan_sha256, run.controller), run.seal):
            return (f"run {run.id} was not planned by a controller of this site (its seal does not verify "
                    "under the site's engine key secret)")
        return None


class RunStore(ABC):
    @abstractmethod
    def add(self, commit: str, status: RunStatus, summary: str, destructive: bool, plan: str, controller: str,
            *, seal: RunSeal | None = None) -> Run:
        """A new run, numbered after the newest; bound to sha256(plan), and sealed with `seal`."""

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

    def approve(self, run_id: int, by: str, *, seal: RunSeal | None = None) -> Run:
        """Approve a waiting run whose plan matches its digest (and, given `seal`, its seal)."""
        run = self.get(run_id)
        if run.status != "waiting":
            raise StateError(f"run {run_id} is {run.status}, not waiting for approval",
                             hint="only a run whose plan destroys something waits for approval")
        why = seal.untrusted(run) if seal is not None else digest_problem(run)
        if why is not None:
            raise StateError(f"run {run_id} is not approved: {why}",
                             hint="the controller plans the commit again at its next commit; approve that run")
        return self._approve(run, by)

    def _approve(self, run: Run, by: str) -> Run:
        return self.update(run.id, status="approved", approved_by=by)


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
        try:
            return [Run(**d) for d in data]
        except TypeError as exc:
            raise StateError(f"the controller's runs {self.path} hold a record that is not a run: {exc}") from None

    def add(self, commit: str, status: RunStatus, summary: str, destructive: bool, plan: str, controller: str,
            *, seal: RunSeal | None = None) -> Run:
        digest = plan_digest(plan)
        with self._locked() as runs:
            run_id = max((r.id for r in runs), default=0) + 1
            run = Run(id=run_id, commit=commit, status=status, summary=summary, destructive=destructive,
                      created_at=_now(), updated_at=_now(), plan=plan, controller=controller, plan_sha256=digest,
                      seal=seal.of(run_id, commit, digest, controller) if seal else "")
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
    controller TEXT NOT NULL DEFAULT '',
    plan_sha256 TEXT NOT NULL DEFAULT '',
    seal TEXT NOT NULL DEFAULT '')"""
# Tables made before runs were bound to their plan gain the columns (their old runs stay unsealed).
_PG_UPGRADE = ("ALTER TABLE llmgw_controller_runs ADD COLUMN IF NOT EXISTS plan_sha256 TEXT NOT NULL DEFAULT '', "
               "ADD COLUMN IF NOT EXISTS seal TEXT NOT NULL DEFAULT ''")
_COLUMNS = ("id, commit, status, summary, destructive, created_at, updated_at, plan, log, approved_by, controller, "
            "plan_sha256, seal")


class PgRuns(RunStore):
    """Runs in the PostgreSQL database that holds the state."""

    def __init__(self, backend: Database, *, create: bool = True) -> None:
        self.backend = backend
        with backend.transaction() as cur:  # the backend's connection: one per process
            # The catalog, not information_schema: that shows only columns the role may use, so a
            # read-only follower would see no table and answer "no run" where the truth is "denied".
            cur.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('llmgw_controller_runs') "
                        "AND attname IN ('id', 'seal') AND NOT attisdropped")
            found = int(cur.fetchone()[0])
            self.exists = found > 0
            if create and found < 2:
                cur.execute("SELECT pg_advisory_xact_lock(7340045)")
                cur.execute(_PG_SCHEMA)
                cur.execute(_PG_UPGRADE)
                self.exists = True

    def _run(self, row: Any) -> Run:
        return Run(*row)

    def add(self, commit: str, status: RunStatus, summary: str, destructive: bool, plan: str, controller: str,
            *, seal: RunSeal | None = None) -> Run:
        digest = plan_digest(plan)
        with self.backend.transaction() as cur:
            cur.execute(f"INSERT INTO llmgw_controller_runs (commit, status, summary, destructive, created_at, "
                        f"updated_at, plan, controller, plan_sha256) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                        f"RETURNING {_COLUMNS}",
                        (commit, status, summary, destructive, _now(), _now(), plan, controller, digest))
            run = self._run(cur.fetchone())
            if seal is None:
                return run
            # The seal covers the id, which the database gives: set in the same transaction.
            cur.execute(f"UPDATE llmgw_controller_runs SET seal = %s WHERE id = %s RETURNING {_COLUMNS}",
                        (seal.of(run.id, commit, digest, controller), run.id))
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

    def _approve(self, run: Run, by: str) -> Run:
        with self.backend.transaction() as cur:  # compare-and-set: two approvers, one approval, of the run checked
            cur.execute(f"UPDATE llmgw_controller_runs SET status = 'approved', approved_by = %s, updated_at = %s "
                        f"WHERE id = %s AND status = 'waiting' AND plan = %s AND plan_sha256 = %s AND seal = %s "
                        f"RETURNING {_COLUMNS}", (by, _now(), run.id, run.plan, run.plan_sha256, run.seal))
            row = cur.fetchone()
        if row is None:
            raise StateError(f"run {run.id} changed while it was being approved (another approval, or an edit)",
                             hint="`llmgw controller runs` shows it now")
        return self._run(row)


def runs_for(backend: StateBackend, *, create: bool = True) -> RunStore:
    """The runs kept beside `backend`'s state; `create=False` only reads (nothing is created)."""
    database = offers(backend, Database)
    if database is not None:
        return PgRuns(database, create=create)
    local = offers(backend, FileBacked)
    if local is not None:
        return FileRuns(local.path.with_name(local.path.name + ".runs.json"))
    raise StateError(f"the controller cannot keep runs beside the state at {backend.where}",
                     hint="use a local state file or a PostgreSQL state (`state:` in llmgw.yaml)")
