"""The controller: the long-running form of plan + apply, following a branch of the site's git
repository.

Each tick: hold (or try to take) leadership; fetch the branch; plan a new commit; apply it
when policy allows (`auto`: plans that destroy nothing; everything else waits for
`llmgw approve RUN`); apply approved runs. Nothing the controller keeps at run time lives in
the site folder (llmgw.controller.checkout): its state, runs, secrets and stores are in its
runtime folder. A new commit is vetted and planned in a fresh checkout of its own; the site
folder holds the commit last applied, which the demand path reads, and moves only when a run
is applied. Only a fast-forward of the commit last applied applies without a person: a
rewind (a force-push, a rollback) waits for approval whatever the policy. A run is applied
only when its plan still matches the digest and seal it was recorded with (runs.py).

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
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from llmgw.apply import applier_for
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.childenv import child_env
from llmgw.controller.checkout import GitError, full_commit, git, materialize, overwrites, prepare_runtime, prune, vet
from llmgw.controller.refresh import Refresher
from llmgw.controller.runs import Run, RunSeal, RunStore, runs_for
from llmgw.controller.scaler import Scaler
from llmgw.errors import LlmgwError, PlanError
from llmgw.inventory import load_inventory
from llmgw.planner import Plan, load_plan, make_plan
from llmgw.planner.load import load_inputs
from llmgw.planner.render import summary_line
from llmgw.planner.trust import widens_trust
from llmgw.site import Site
from llmgw.state import Leases, LockHeld, State, StateBackend, WriteMeta, offers
from llmgw.state.select import backend_for

log = logging.getLogger("llmgw.controller")

LEASE = "controller"
POLICIES = ("auto", "approve", "auto-all")

__all__ = ["POLICIES", "Controller", "GitError", "Status"]


def _git(repo: Path, *args: str) -> str:
    return git(repo, *args).strip()


@dataclass
class Status:
    leader: bool = False
    holder: str | None = None
    last_commit: str | None = None
    error: str | None = None


class Controller:
    def __init__(self, site_dir: Path, *, branch: str | None = "main", remote: str = "origin", policy: str = "auto",
                 grace: float = 120.0, name: str | None = None, runtime: Path | None = None,
                 backend: StateBackend | None = None, say: Callable[[str], None] | None = None) -> None:
        """`runtime`: the controller's own folder (llmgw.controller.checkout), outside `site_dir`;
        required when following a branch. Without one (`branch=None` only) the state and its
        runs stay where the site says, as for `llmgw apply`."""
        if policy not in POLICIES:
            raise PlanError(f"unknown controller policy {policy!r}", hint=f"use one of {', '.join(POLICIES)}")
        self.site_dir = site_dir.resolve()
        if branch is not None and runtime is None:
            raise PlanError("a controller following a branch needs a runtime folder outside its site folder",
                            hint="pass --runtime-dir (the state, runs and secrets live there, never in the clone)")
        self.runtime = prepare_runtime(runtime, self.site_dir) if runtime is not None else None
        self.branch = branch
        self.remote = remote
        self.policy = policy
        self.grace = grace
        self.name = name or f"controller {socket.gethostname()} pid {os.getpid()}"
        here = self._site(self.site_dir)
        self.backend = backend or backend_for(here)
        self.runs: RunStore = runs_for(self.backend)
        self.seal = RunSeal(EngineKeyring.beside(here.state_file))
        self.say = say or (lambda line: log.info("%s", line))
        self.status = Status()
        self._leadership = contextlib.ExitStack()
        self._mutex = threading.Lock()  # one tick at a time (the loop, and an API approval)
        # When the clock alone changes the last commit's plan (a drain deadline, a node turning
        # lost: PlanInputs.next_change); that commit is planned again then. Kept in memory: after a
        # restart, the next commit (or `llmgw plan`) sees it.
        self._replan_at: datetime | None = None
        self.scaler = Scaler(runs=self.runs, backend=self.backend, name=self.name, grace=grace, say=self.say,
                             seal=self.seal)
        # Facts of nodes whose replicas every router finds failing (refresh.py), on the demand tick.
        self.refresher = Refresher(say=self.say)

    def _site(self, root: Path, *, facts: Path | None = None) -> Site:
        return Site.load(root, runtime=self.runtime, facts=facts)

    # -- leadership -----------------------------------------------------------------------

    def _lead(self) -> bool:
        """Hold leadership, or try to take it; True when this controller may write."""
        leases = offers(self.backend, Leases)
        if leases is None:  # a local state: its one controller leads (the state lock keeps out others)
            self.status.leader = True
            return True
        if self.status.leader:
            lost = leases.lease_lost(LEASE)
            if lost is None:
                return True
            self.say(f"lost leadership: {lost}; standing by")
            self._leadership.close()
            self._leadership = contextlib.ExitStack()
            self.status.leader = False
        try:
            self._leadership.enter_context(leases.lease_on(LEASE, "controller", holder=self.name))
        except LlmgwError:
            holder = leases.lease_holder(LEASE)
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
                elif self._replan_at is not None and datetime.now(UTC) >= self._replan_at:
                    self.say(f"{head[:12]}: planned again: a drain deadline passed or a node stopped answering")
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
                    return  # the branch not looked at yet: the next tick plans it first
                # The site folder holds the commit last applied (or approved), never one waiting.
                site = self._site(self.site_dir)
                self._refresh_facts(site)
                self.scaler.tick(site, self._applied() if self.branch is not None else "")
            except LlmgwError as exc:
                self.status.error = exc.message
                self.say(f"demand: {exc.message}")
            except Exception as exc:  # a long-running service: say it, and look again next time
                log.exception("demand tick failed")
                self.status.error = f"demand: {type(exc).__name__}: {exc}"

    def _refresh_facts(self, site: Site) -> None:
        """Gather facts of nodes whose replicas the routers find failing (refresh.py); when that
        changes a node's reachability, the commit is planned again at the next tick (the plan's
        `_replan_at` comes from facts, and only planning computes it)."""
        now = time.monotonic()
        routers = load_inventory(site.inventory).routers
        if self.refresher.refresh(site, self.scaler.reports.fresh(now), routers, self.backend.read, now):
            self._replan_at = datetime.now(UTC)

    def _fetch(self) -> str:
        assert self.branch is not None
        _git(self.site_dir, "fetch", "--quiet", self.remote, self.branch)
        return _git(self.site_dir, "rev-parse", "--verify", "FETCH_HEAD^{commit}")

    def _applied(self) -> str:
        """The commit in the site folder: the one last applied (or approved and being applied)."""
        return _git(self.site_dir, "rev-parse", "--verify", "HEAD^{commit}")

    def _planning_site(self, commit: str) -> Site:
        """`commit` vetted and checked out afresh in the runtime folder, to be planned there; facts
        come from it, or from the site folder's (gathered there) when it holds none."""
        assert self.runtime is not None
        vet(self.site_dir, commit)
        trees = self.runtime / "trees"
        tree = materialize(self.site_dir, commit, trees)
        prune(trees, {commit})
        return self._site(tree, facts=(self.site_dir / Site.load(tree).config.facts).resolve())

    def _check_out(self, commit: str) -> Site:
        """Move the site folder to `commit` (vetted, and overwriting nothing untracked) to apply it."""
        overwrites(self.site_dir, vet(self.site_dir, commit), commit)
        _git(self.site_dir, "checkout", "--quiet", "--force", "--detach", commit)
        if (now := self._applied()) != commit:
            raise GitError(f"the site folder is at {now[:12]} after checking out {commit[:12]}")
        return self._site(self.site_dir)

    def _rewind(self, commit: str) -> str | None:
        """Why `commit` is not a fast-forward of the commit last applied, or None when it is."""
        applied = self._applied()
        done = subprocess.run(["git", "-C", str(self.site_dir), "merge-base", "--is-ancestor", applied, commit],
                              capture_output=True, text=True, timeout=120, check=False, env=child_env())
        if done.returncode == 0:
            return None
        if done.returncode != 1:
            raise GitError(f"git merge-base in {self.site_dir} failed: {done.stderr.strip()[-400:]}")
        return (f"rewind: {commit[:12]} does not descend from {applied[:12]}, the commit last applied "
                "(a force-push or a rollback)")

    def _needs_approval(self, plan: Plan, state: State, commit: str) -> str | None:
        """Why the plan of `commit` waits for a person, or None when policy applies it unapproved.
        The one place that decides."""
        rewind = self._rewind(commit)
        if rewind is not None:
            return rewind  # whatever the policy: a force-push must not roll the fleet back unseen
        if self.policy == "approve":
            return "policy approve: every plan waits"
        if self.policy == "auto" and plan.summary.destroy > 0:
            # A drain's deadline ending in a destroy takes the model below min: say so, not just "destroys".
            ended = [a.replica or "" for a in plan.actions if a.code == "drain_deadline"]
            return "it destroys" + (f" ({', '.join(ended)}: past a drain deadline, below scaling.min)" if ended else "")
        trusting = widens_trust(plan, state) if self.policy == "auto" else []
        if trusting:
            # Anyone who may commit to the catalog can set trust_remote_code: a person reviews it.
            return f"it runs the model's own code (trust_remote_code) in {', '.join(trusting)}"
        return None

    def _plan(self, commit: str) -> None:
        for old in self.runs.all():
            if old.status in ("waiting", "approved"):
                self.runs.update(old.id, status="superseded", log=old.log + f"\nsuperseded by commit {commit[:12]}")
        self.status.last_commit = commit
        try:
            inputs = load_inputs(self._planning_site(commit))
            self._replan_at = inputs.next_change()
            plan = make_plan(inputs)
            why = self._needs_approval(plan, inputs.state, commit) if plan.has_changes else None
        except GitError:
            self.status.last_commit = None  # the repository, not the commit: look again next tick
            raise
        except LlmgwError as exc:
            self.runs.add(commit, "failed", f"cannot plan: {exc.message}", False, "", self.name, seal=self.seal)
            self.say(f"{commit[:12]}: cannot plan: {exc.message}")
            return
        destructive = plan.summary.destroy > 0
        if not plan.has_changes:
            self.runs.add(commit, "no-changes", summary_line(plan), False, plan.to_json(), self.name, seal=self.seal)
            return
        summary = summary_line(plan) if why is None or not why.startswith("rewind") else f"{why}. {summary_line(plan)}"
        run = self.runs.add(commit, "planned" if why is None else "waiting", summary, destructive, plan.to_json(),
                            self.name, seal=self.seal)
        if why is not None:
            self.say(f"run {run.id} ({commit[:12]}): {run.summary} waits for approval ({why}; "
                     f"`llmgw approve {run.id}`)")
        else:
            self._apply(run)

    def _untrusted(self, run: Run) -> str | None:
        if not full_commit(run.commit):
            return f"run {run.id}'s commit {run.commit!r} is not a full commit hash"
        return self.seal.untrusted(run)

    def _apply(self, run: Run) -> None:
        why = self._untrusted(run)
        if why is not None:
            self.runs.update(run.id, status="failed", log=f"refused: {why}; nothing was applied")
            self.say(f"run {run.id}: refused: {why}")
            return
        plan = load_plan(run.plan, f"run {run.id}")
        lines: list[str] = []

        def say(line: str) -> None:
            lines.append(line)
            self.say(f"run {run.id}: {line}")

        self.runs.update(run.id, status="applying")
        try:
            site = self._check_out(run.commit)
            meta = WriteMeta("controller", plan=run.plan_sha256[:12], git_commit=run.commit)
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
        return self.runs.approve(run_id, by, seal=self.seal)

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
