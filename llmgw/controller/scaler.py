"""The controller's demand loop: routers' reports and activation requests in, scale runs out.

The API (api.py) hands reports and activation requests to a `Scaler`; the controller's
loop calls `Scaler.tick` every few seconds while it leads. Each tick reads the catalog at
the commit the controller last applied (its site folder: never a commit waiting for approval,
which is planned in a checkout of its own) and the state, decides per model
(llmgw.controller.demand) and carries out at most one action: a plan of the replicas the
load needs more (llmgw.apply.on_demand_plans.activation_plan; one for an activation) or of one
drained (deactivation_plan), applied
by the same Applier as `llmgw apply` under the state's lock, and recorded as a run in the
controller's history with its reason. A model that cannot be placed says why, in its
last decision and, for an activation, to the routers holding its requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from llmgw.apply import applier_for
from llmgw.apply.on_demand_plans import activation_plan, deactivation_plan
from llmgw.catalog import load_catalog
from llmgw.controller.demand import Decision, History, ModelDemand, Reports, decide, desired_count, fleet_view, load_of
from llmgw.controller.metrics import ControllerMetrics
from llmgw.controller.runs import RunSeal, RunStore
from llmgw.errors import LlmgwError
from llmgw.inventory import load_inventory
from llmgw.planner import Plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import LockHeld, State, StateBackend, WriteMeta

ActivationStatus = Literal["pending", "starting", "ready", "failed"]
# A failed activation is told to routers for this long; a request after it asks again.
FAILED_KEPT = 10.0
DEFAULT_HOLD = 300


@dataclass
class Activation:
    model: str
    status: ActivationStatus
    reason: str = ""
    since: float = 0.0  # monotonic
    hold_s: int = DEFAULT_HOLD

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "status": self.status, "reason": self.reason, "hold_s": self.hold_s}


@dataclass
class ModelView:
    """Per model, for `llmgw models` and the dashboard: replicas now and wanted, the last decision."""

    current: int = 0
    desired: int = 0
    load: int = 0
    decision: str = ""  # the last action taken, and its reason
    decided_at: str | None = None
    note: str = ""  # why nothing was done at the last look


class Scaler:
    def __init__(self, *, runs: RunStore, backend: StateBackend, name: str, grace: float,
                 say: Callable[[str], None], reports: Reports | None = None, seal: RunSeal | None = None) -> None:
        self.runs = runs
        self.seal = seal
        self.backend = backend
        self.name = name
        self.grace = grace
        self.say = say
        self.reports = reports or Reports()
        self.history = History()
        self.views: dict[str, ModelView] = {}
        self.routers: tuple[str, ...] = ()
        self.unknown: tuple[str, ...] = ()
        self.wake = threading.Event()  # an activation request: tick now
        self._lock = threading.Lock()
        self._activations: dict[str, Activation] = {}
        self._holds: dict[str, int] = {}  # model -> activation_timeout from the catalog
        self.metrics = ControllerMetrics(lambda: [a.model for a in self.activations()])

    # -- from the API (any thread) -----------------------------------------------------------

    def ask(self, model: str, state_ready: Callable[[str], bool]) -> Activation:
        """A router asks for `model` to be started (idempotent: one activation for many asks)."""
        now = time.monotonic()
        with self._lock:
            hold = self._holds.get(model, DEFAULT_HOLD)
            current = self._activations.get(model)
            if current is not None and current.status == "failed" and now - current.since > FAILED_KEPT:
                current = None
            if current is None or current.status == "ready":
                if state_ready(model):
                    current = Activation(model, "ready", since=now, hold_s=hold)
                else:
                    current = Activation(model, "pending", "asked by a router", since=now, hold_s=hold)
                    self.wake.set()
                self._activations[model] = current
            return current

    def activation(self, model: str) -> Activation | None:
        with self._lock:
            return self._activations.get(model)

    def activations(self) -> list[Activation]:
        with self._lock:
            return [a for a in self._activations.values() if a.status in ("pending", "starting")]

    def _set(self, model: str, status: ActivationStatus, reason: str = "") -> None:
        with self._lock:
            hold = self._holds.get(model, DEFAULT_HOLD)
            self._activations[model] = Activation(model, status, reason, time.monotonic(), hold)

    # -- the loop (the controller's thread, holding its tick mutex) -------------------------

    def tick(self, site: Site, commit: str) -> None:
        now = time.monotonic()
        catalog = load_catalog(site.catalog_dir, root=site.root)
        inventory = load_inventory(site.inventory)
        state = self.backend.read()
        self.routers = tuple(sorted(inventory.routers))
        fleet = fleet_view(self.reports.fresh(now), self.routers)
        self.unknown = fleet.unknown
        with self._lock:
            self._holds = {m.name: m.scaling.activation_timeout for m in catalog}
            asked = {m for m, a in self._activations.items() if a.status == "pending"}
        self.metrics.models = frozenset(m.name for m in catalog)
        chosen: Decision | None = None
        for m in catalog:
            demand = model_demand(m.name, m.scaling, state, datetime.now(UTC))
            decision, note = decide(demand, fleet, self.history, now, asked=m.name in asked)
            view = self.views.setdefault(m.name, ModelView())
            view.current = len(demand.ready) + len(demand.starting)
            view.load = load_of(demand, fleet)
            view.desired = decision.desired if decision else (desired_count(demand, view.load) if view.current
                                                               else 0)
            view.note = note
            if decision is not None and chosen is None:
                chosen = decision
            elif m.name in asked and demand.ready:
                self._set(m.name, "ready")
        for unknown in asked - {m.name for m in catalog}:
            self._set(unknown, "failed", f"{unknown} is not a model in the catalog")
            self.metrics.activation(unknown, "refused")
        if chosen is not None:
            self._carry_out(site, commit, chosen, state)

    def _carry_out(self, site: Site, commit: str, d: Decision, state: State) -> None:
        view = self.views.setdefault(d.model, ModelView())
        up = d.kind in ("activate", "scale-up")
        try:
            if up:
                plan = activation_plan(load_inputs(site), d.model, more=d.kind == "scale-up",
                                       count=d.desired - d.current, code="demand", reason=d.reason)
            else:
                assert d.replica is not None
                plan = deactivation_plan(state, d.replica, code="idle" if d.kind == "stop-idle" else "demand",
                                         reason=d.reason)
        except LlmgwError as exc:
            why = f"cannot place more of {d.model}: {exc.message}" + (f" ({'; '.join(exc.detail[:3])})"
                                                                      if exc.detail else "")
            self.history.last_action[d.model] = time.monotonic()  # no retry before the cooldown
            view.decision, view.decided_at = f"{d.kind} refused: {why}", _stamp()
            if d.kind == "activate":
                self._set(d.model, "failed", why)
            self._count(d, "refused")
            self.say(why)
            return
        if plan is None:
            if d.kind == "activate":
                self._set(d.model, "ready")
            return
        if d.kind == "activate":
            self._set(d.model, "starting", d.reason)
        summary = f"demand: {d.kind} {d.model} {d.current} -> {d.desired} replicas: {d.reason}"
        if up and d.current + len(plan.actions) < d.desired:
            # Fewer fit than the load wants: start those, and say why not the rest (the next
            # scale up, after the cooldown, tries again).
            placed = d.current + len(plan.actions)
            why = "; ".join(dict.fromkeys(r.reason for u in plan.unplaced for r in u.rejections)) or "no room"
            # The shortfall goes after the reason: `llmgw models` reads "CURRENT -> DESIRED replicas:
            # REASON" (llmgw.views.demand).
            summary = (f"demand: {d.kind} {d.model} {d.current} -> {placed} replicas: {d.reason}; {d.desired} "
                       f"wanted, no node can take more: {why[:300]}")
        self._apply(site, commit, plan, summary, d, view, destructive=not up)

    def _apply(self, site: Site, commit: str, plan: Plan, summary: str, d: Decision, view: ModelView, *,
               destructive: bool) -> None:
        run = self.runs.add(commit, "applying", summary, destructive, plan.to_json(), self.name, seal=self.seal)
        self.say(f"run {run.id}: {summary}")
        lines: list[str] = []

        def say(line: str) -> None:
            lines.append(line)
            self.say(f"run {run.id}: {line}")

        meta = WriteMeta("demand", plan=run.plan_sha256[:12], git_commit=commit)
        try:
            with self.backend.lock(f"controller run {run.id} ({d.kind} {d.model})"):
                # The routers' service is apply's: a demand run changes replicas alone, so it
                # delivers the state alone (a router new to the inventory gets its service from apply).
                outcome = applier_for(site, plan, grace=self.grace, say=say, engines_playbook="activate.yml",
                                      backend=self.backend, meta=meta, routers_installed=True).run()
        except LockHeld as held:
            # A person's apply holds the state: decided again at the next tick.
            self.runs.update(run.id, status="failed", log=f"the state's lock is held: {held.holder.describe()}")
            if d.kind == "activate":
                self._set(d.model, "pending", "waiting for the state's lock")
            self._count(d, "deferred")
            return
        except LlmgwError as exc:
            lines += [f"Error: {exc.message}", *exc.detail]
            self.runs.update(run.id, status="failed", log="\n".join(lines)[-16000:])
            self.history.last_action[d.model] = time.monotonic()
            view.decision, view.decided_at = f"{d.kind} failed: {exc.message}", _stamp()
            if d.kind == "activate":
                self._set(d.model, "failed", f"could not start a replica: {exc.message}")
            self._count(d, "failed")
            return
        lines.append(f"applied: {len(outcome.created)} added, {len(outcome.destroyed)} destroyed "
                     f"(state serial {outcome.serial})")
        self.runs.update(run.id, status="applied", log="\n".join(lines)[-16000:])
        self.history.last_action[d.model] = time.monotonic()
        self.history.low_since.pop(d.model, None)
        view.decision, view.decided_at = f"{d.kind} (run {run.id}): {d.reason}", _stamp()
        if d.kind == "activate":
            self._set(d.model, "ready")
        self._count(d, "applied")

    def _count(self, d: Decision, outcome: Literal["applied", "failed", "refused", "deferred"]) -> None:
        self.metrics.decision(d.model, d.kind, outcome)
        if d.kind == "activate":
            self.metrics.activation(d.model, "started" if outcome == "applied" else outcome)

    def view(self) -> dict[str, Any]:
        """Per model: current/desired replicas, load, the last decision; activations in flight.

        `current` is counted from the state as it is now, not as the last tick saw it: a tick
        is blocked for the whole of an apply (minutes: after writing the new replica ready,
        the apply still delivers the state to every router), so the tick's count lags the
        state by as long (seen in the lab: 3 ready replicas, the view saying 2 for over 60 s)."""
        now = self._current_counts()
        return {"routers": list(self.routers), "routers_not_known": list(self.unknown),
                "models": {name: {"current": now.get(name, 0) if now is not None else v.current,
                                  "desired": v.desired, "load": v.load,
                                  "last_decision": v.decision, "decided_at": v.decided_at, "note": v.note}
                           for name, v in sorted(self.views.items())},
                "activations": [a.as_json() for a in self.activations()]}

    def _current_counts(self) -> dict[str, int] | None:
        """Model -> ready and starting replicas in the state now; None when it cannot be read
        (the view then keeps the last tick's counts)."""
        try:
            state = self.backend.read()
        except LlmgwError:
            return None
        counts: dict[str, int] = {}
        for r in state.replicas:
            if r.state in ("ready", "starting"):
                counts[r.model] = counts.get(r.model, 0) + 1
        return counts


def model_demand(name: str, scaling: Any, state: State, now: datetime) -> ModelDemand:
    """A catalog model's scaling and its replicas in `state`, for llmgw.controller.demand."""
    mine = [r for r in state.replicas if r.model == name]
    ages = {r.id: max(0.0, (now - r.created_at).total_seconds()) for r in mine if r.created_at is not None}
    return ModelDemand(name=name, min=scaling.min, max=scaling.maximum, idle_timeout=scaling.idle_timeout,
                       target_in_flight=scaling.target_in_flight, up_cooldown=scaling.up_cooldown,
                       down_cooldown=scaling.down_cooldown,
                       ready=tuple(r.id for r in mine if r.state == "ready"),
                       starting=tuple(r.id for r in mine if r.state == "starting"), age_s=ages)


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
