"""Plans for demand (llmgw.controller.demand): replicas more, or one replica less.

The controller starts replicas of a model (an activation of a `min: 0` model: one; a scale
up on load: as many as the load needs, capped by `max` and by what the fleet can place) and
drains one (an idle stop, a scale down) with the same Applier as `llmgw apply`, so each is
rolling, resumable and recorded step by step like any apply. These plans carry only that
change: the rest of the fleet is left to the next plan.
"""

from __future__ import annotations

import dataclasses

from llmgw.catalog import Catalog
from llmgw.errors import PlanError
from llmgw.planner import Action, Desired, Plan, PlanInputs, Summary, UnitRef, make_plan
from llmgw.state import ModelRecord, State


def activation_plan(inputs: PlanInputs, model: str, *, more: bool = False, count: int = 1, code: str = "activate",
                    reason: str = "") -> Plan | None:
    """A plan that creates replicas of `model` (name or alias); None when one already serves,
    unless `more` (a scale up: `count` more however many serve, at most up to `scaling.max`).

    Places as many of them as the fleet can take, at least one: the plan's `unplaced` then
    says why not the rest (a scale up still helps with what fits)."""
    m = inputs.catalog.resolve(model)
    if m is None:
        raise PlanError(f"{model} is not a model in the catalog")
    live = [r for r in inputs.state.replicas if r.model == m.name and r.state != "draining"]
    if not more and any(r.state == "ready" for r in live):
        return None
    if len(live) >= m.scaling.maximum:
        raise PlanError(f"{m.name} already runs {len(live)} replicas, its scaling.max")
    count = max(1, min(count if more else 1, m.scaling.maximum - len(live)))
    bumped = m.model_copy(update={"scaling": m.scaling.model_copy(update={"min": len(live) + count,
                                                                          "max": m.scaling.maximum})})
    entries = [dataclasses.replace(e, model=bumped) if e.model.name == m.name else e for e in inputs.catalog.entries]
    full = make_plan(dataclasses.replace(inputs, catalog=Catalog(entries)))
    creates = [a for a in full.actions if a.action == "create" and a.model == m.name][:count]
    unplaced = [u for u in full.unplaced if u.model == m.name]
    if not creates:
        reasons = [r.reason for u in unplaced for r in u.rejections][:5]
        raise PlanError(f"no node can take a replica of {m.name}", detail=reasons,
                        hint=f"run `llmgw explain {m.name}` on the control host")
    ids = {a.replica for a in creates}
    new = [r for r in full.desired.replicas if r.id in ids]
    if reason:
        creates = [a.model_copy(update={"code": code, "reason": reason}) for a in creates]
    return full.model_copy(update={"actions": creates, "summary": Summary(add=len(creates)),
                                   "unplaced": unplaced if len(creates) < count else [], "notes": [],
                                   "desired": Desired(replicas=new, models=_models(inputs.state))})


def deactivation_plan(state: State, replica_id: str, *, code: str = "idle",
                      reason: str = "idle for its idle_timeout") -> Plan | None:
    """A plan that drains and destroys one replica; None when the state no longer has it."""
    r = state.replica(replica_id)
    if r is None:
        return None
    units = [UnitRef(node=s.node, unit=s.unit) for s in sorted(r.shards, key=lambda s: s.rank)]
    action = Action(action="destroy", replica=r.id, model=r.model, code=code, reason=reason, units=units)
    return Plan(state_serial=state.serial, state_lineage=state.lineage, summary=Summary(destroy=1), actions=[action],
                desired=Desired(replicas=[], models=_models(state)))


def _models(state: State) -> list[ModelRecord]:
    """The routers' model records stay as the last apply left them (on demand stays on demand)."""
    return list(state.models)
