"""The controller: the long-running form of plan + apply, following a branch of the site's git
repository.

Each tick: hold (or try to take) leadership; fetch the branch; plan a new commit; apply it
when policy allows (`auto`: plans that destroy nothing; everything else waits for
`llmgw approve RUN`); apply approved runs. The site folder is a clone of the repository
checked out at the commit being planned (untracked files such as a local state stay).

Leadership is the `controller` lease in a PostgreSQL state (the state's own database):
one controller holds it and renews it; the others stand by and try each tick, so one
takes over within a lease period after the leader dies, and first marks the run the
leader left `applying` as interrupted and plans that commit again (the state records how
far the leader got, so the new plan finishes the job). A controller that loses its lease
stops before its next write. With a local state file there is no election: run one
controller per state.

Demand (scaler.py, docs/demand.md): between ticks, every `demand_interval` seconds (at
once when a router asks for a model), the leader decides from the routers' reports what to
start, scale or drain, and applies it as a run of its own. With `branch=None` the
controller follows no repository: the site folder is used as it is, for demand alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmgw.apply import applier_for
from llmgw.childenv import child_env
from llmgw.controller.runs import Run, RunStore, runs_for
from llmgw.controller.scaler import Scaler
from llmgw.errors import LlmgwError, PlanError
from llmgw.planner import load_plan, make_plan
from llmgw.planner.load import load_inputs
from llmgw.planner.render import summary_line
from llmgw.site import Site
from llmgw.state import LockHeld, PostgresBackend, StateBackend, WriteMeta, backend_for

log = logging.getLogger("llmgw.controller")

LEASE = "controller"
POLICIES = ("auto", "approve", "auto-all")


class GitError(LlmgwError):
    pass


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120, check=False,
                          env=child_env())
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} in {repo} failed: {(done.stderr or done.stdout).strip()[-400:]}")
    return done.stdout.strip()


@dataclass
class Status:
    leader: bool = False
    holder: str | None = None
    last_commit: str | None = None
    error: str | None = None


class Controller:
    def __init__(self, site_dir: Path, *, branch: str | None = "main", remote: str = "origin", policy: str = "auto",
                 grace: float = 120.0, name: str | None = None,
                 backend: StateBackend | None = None, say: Callable[[str], None] | None = None) -> None:
        if policy not in POLICIES:
            raise PlanError(f"unknown controller policy {policy!r}", hint=f"use one of {', '.join(POLICIES)}")
        self.site_dir = site_dir.resolve()
        self.branch = branch
        self.remote = remote
        self.policy = policy
        self.grace = grace
        self.name = name or f"controller {socket.gethostname()} pid {os.getpid()}"
        self.backend = backend or backend_for(Site.load(self.site_dir))
        self.runs: RunStore = runs_for(self.backend)
        self.say = say or (lambda line: log.info("%s", line))
        self.status = Status()
        self._leadership = contextlib.ExitStack()
        self._mutex = threading.Lock()  # one tick at a time (the loop, and an API approval)
        self.scaler = Scaler(runs=self.runs, backend=self.backend, name=self.name, grace=grace, say=self.say)

    # -- leadership -----------------------------------------------------------------------

    def _lead(self) -> bool:
        """Hold leadership, or try to take it; True when this controller may write."""
        if not isinstance(self.backend, PostgresBackend):
            self.status.leader = True
            return True
        if self.status.leader:
            lost = self.backend.lease_lost(LEASE)
            if lost is None:
                return True
            self.say(f"lost leadership: {lost}; standing by")
            self._leadership.close()
            self._leadership = contextlib.ExitStack()
            self.status.leader = False
        try:
            self._leadership.enter_context(self.backend.lease_on(LEASE, "controller", holder=self.name))
        except LlmgwError:
            holder = self.backend.lease_holder(LEASE)
            self.status.holder = holder.holder if holder else None
            return False
        self.status.leader, self.status.holder = True, self.name
        self.say(f"{self.name} leads")
        for run in self.runs.all():
            if run.status == "applying":
                self.runs.update(run.id, status="interrupted",
                                 log=run.log + "\nthe controller applying it stopped; its commit is planned again")
                self.status.last_commit = None  # plan the head again: the new plan finishes the job
        return True

    def stop(self) -> None:
        self._leadership.close()
        self.status.leader = False

    # -- one tick -------------------------------------------------------------------------

    def tick(self) -> None:
        with self._mutex:
            try:
                if not self._lead():
                    return
                if self.branch is None:
                    return
                head = self._fetch()
                if self.status.last_commit is None:
                    newest = next(iter(self.runs.all()), None)
                    if newest is not None and newest.status not in ("interrupted",) and newest.commit == head:
                        self.status.last_commit = head  # planned already (by us before a restart, or a leader)
                if head != self.status.last_commit:
                    self._plan(head)
                for run in sorted(self.runs.all(), key=lambda r: r.id):
                    if run.status == "approved":
                        self._apply(run)
                self.status.error = None
            except LlmgwError as exc:
                self.status.error = exc.message
                self.say(f"error: {exc.message}")

    def demand_tick(self) -> None:
        """Act on the routers' reports and activation requests (scaler.py), while leading."""
        with self._mutex:
            try:
                if not self._lead():
                    return
                if self.branch is not None and self.status.last_commit is None:
                    return  # nothing checked out yet: the next tick plans the branch first
                self.scaler.tick(Site.load(self.site_dir), self.status.last_commit or "")
            except LlmgwError as exc:
                self.status.error = exc.message
                self.say(f"demand: {exc.message}")
            except Exception as exc:  # a long-running service: say it, and look again next time
                log.exception("demand tick failed")
                self.status.error = f"demand: {type(exc).__name__}: {exc}"

    def _fetch(self) -> str:
        assert self.branch is not None
        _git(self.site_dir, "fetch", "--quiet", self.remote, self.branch)
        return _git(self.site_dir, "rev-parse", "FETCH_HEAD")

    def _checkout(self, commit: str) -> Site:
        _git(self.site_dir, "checkout", "--quiet", "--detach", commit)
        return Site.load(self.site_dir)

    def _plan(self, commit: str) -> None:
        for old in self.runs.all():
            if old.status in ("waiting", "approved"):
                self.runs.update(old.id, status="superseded", log=old.log + f"\nsuperseded by commit {commit[:12]}")
        site = self._checkout(commit)
        self.status.last_commit = commit
        try:
            plan = make_plan(load_inputs(site))
        except LlmgwError as exc:
            self.runs.add(commit, "failed", f"cannot plan: {exc.message}", False, "", self.name)
            return
        destructive = plan.summary.destroy > 0
        if not plan.has_changes:
            self.runs.add(commit, "no-changes", summary_line(plan), False, plan.to_json(), self.name)
            return
        waits = self.policy == "approve" or (destructive and self.policy == "auto")
        run = self.runs.add(commit, "waiting" if waits else "planned", summary_line(plan), destructive,
                            plan.to_json(), self.name)
        if waits:
            self.say(f"run {run.id} ({commit[:12]}): {run.summary} waits for approval (`llmgw approve {run.id}`)")
        else:
            self._apply(run)

    def _apply(self, run: Run) -> None:
        plan = load_plan(run.plan, f"run {run.id}")
        lines: list[str] = []

        def say(line: str) -> None:
            lines.append(line)
            self.say(f"run {run.id}: {line}")

        self.runs.update(run.id, status="applying")
        try:
            site = self._checkout(run.commit)
            meta = WriteMeta("controller", plan=hashlib.sha256(run.plan.encode()).hexdigest()[:12],
                             git_commit=run.commit)
            with self.backend.lock(f"controller run {run.id}"):
                outcome = applier_for(site, plan, grace=self.grace, say=say, backend=self.backend, meta=meta).run()
            lines.append(f"applied: {len(outcome.created)} added, {len(outcome.destroyed)} destroyed "
                         f"(state serial {outcome.serial})")
            self.runs.update(run.id, status="applied", log="\n".join(lines)[-16000:])
        except LockHeld as held:
            # A person's apply (or an activation) holds the state: try again next tick.
            self.runs.update(run.id, status="approved", log=f"waiting for the state's lock: {held.holder.describe()}")
        except LlmgwError as exc:
            lines.append(f"Error: {exc.message}")
            lines.extend(exc.detail)
            self.runs.update(run.id, status="failed", log="\n".join(lines)[-16000:])
            if "stale" in exc.message:
                self.status.last_commit = None  # plan the head again against the newer state

    def approve(self, run_id: int, by: str) -> Run:
        return self.runs.approve(run_id, by)

    def serve_forever(self, interval: float, stop: threading.Event, demand_interval: float = 2.0) -> None:
        """Tick every `interval` seconds and look at demand every `demand_interval` (at once when
        a router asks for a model), until `stop` is set."""
        next_tick = 0.0
        while not stop.is_set():
            if time.monotonic() >= next_tick:
                self.tick()
                next_tick = time.monotonic() + interval
            self.scaler.wake.clear()
            self.demand_tick()
            self.scaler.wake.wait(min(demand_interval, max(0.0, next_tick - time.monotonic())))
            if stop.is_set():
                break
        self.stop()
