"""`llmgw explain MODEL`: every candidate node per profile, and why it was or was not chosen.

Explain runs the very same plan as `llmgw plan`, recording each placement attempt of
the one model, so what it says is what the plan did, not a second opinion. It also says
how the model's replicas are spread (hosts, failure domains, `spread:` labels) and, where
they share one, what kept the other candidates out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgw.catalog import Model, Profile
from llmgw.errors import PlanError
from llmgw.planner.inputs import PlanInputs
from llmgw.planner.placement import FAILURE_DOMAIN_VAR, Verdict
from llmgw.planner.reconcile import Attempt, Trace, traced_plan
from llmgw.planner.schema import Plan, PlannedReplica, PlannedShard


@dataclass(frozen=True)
class SpreadLevel:
    """One level a model spreads over: the values its replicas use, and the other candidates
    that would have spread it further with why they could not (only when replicas share a value)."""

    name: str  # "host", "failure domain", "label rack"
    used: list[str]
    not_further: list[tuple[str, str]]  # (node, reason)


@dataclass(frozen=True)
class Explanation:
    model: Model
    plan: Plan
    trace: Trace
    spread: list[SpreadLevel] = field(default_factory=list)

    @property
    def replicas(self) -> list[PlannedReplica]:
        return [r for r in self.plan.desired.replicas if r.model == self.model.name]

    @property
    def status(self) -> str:
        placed = len(self.replicas)
        unplaced = next((u for u in self.plan.unplaced if u.model == self.model.name), None)
        if self.model.scaling.min == 0 and not self.trace.attempts:
            return "on demand"
        if unplaced is not None and unplaced.placed >= unplaced.wanted:
            return "not moved"  # every replica wanted is placed; one the plan would move stays
        if unplaced is not None:
            return "partly placed" if placed else "not placed"
        return "placed"


def explain(inputs: PlanInputs, name: str) -> Explanation:
    """Explain model `name` (or an alias); a name the catalog does not know is an error that says so."""
    model = inputs.catalog.resolve(name)
    if model is None:
        in_state = sorted(r.id for r in inputs.state.replicas if r.model == name)
        if in_state:
            raise PlanError(f"{name} is not in the catalog, so it is never placed; the plan destroys its "
                            f"replicas ({', '.join(in_state)})")
        known = ", ".join(m.name for m in inputs.catalog) or "none"
        raise PlanError(f"{name} is not in the catalog, so it is never placed",
                        hint=f"models in the catalog: {known}")
    plan, trace = traced_plan(inputs, model.name)
    return Explanation(model, plan, trace, _spread(inputs, model, plan, trace))


_FITS_NOW = "fits now; replicas placed before stay where they are (a drain or a new replica would go apart)"


def _spread(inputs: PlanInputs, model: Model, plan: Plan, trace: Trace) -> list[SpreadLevel]:
    replicas = [r for r in plan.desired.replicas if r.model == model.name]
    if len(replicas) < 2:
        return []
    leaders = [r.shards[0].node for r in replicas if r.shards]
    reasons: dict[str, str] = {}
    profile = replicas[0].profile
    for v in trace.final_verdicts.get(profile, []):
        if v.node is not None:
            reasons[v.node] = v.reason or _FITS_NOW
    hosts = inputs.nodes

    def value_of(level: str, name: str) -> str | None:
        h = hosts.get(name)
        if h is None:
            return None
        if level == "host":
            return name
        if level == "failure domain":
            raw = h.vars.get(FAILURE_DOMAIN_VAR)
            return None if raw is None or raw == "" else str(raw)
        return h.labels.get(level.removeprefix("label "))

    out = []
    for level in ("host", "failure domain", *(f"label {lb}" for lb in model.spread)):
        used: list[str] = []
        for n in leaders:
            val = value_of(level, n)
            if val is not None and val not in used:
                used.append(val)
        if not used:
            continue  # no host declares this level
        others: list[tuple[str, str]] = []
        if len(used) < len(leaders):
            for name in sorted(hosts):
                val = value_of(level, name)
                if val is not None and val not in used:
                    others.append((name, reasons.get(name, "not a node")))
        out.append(SpreadLevel(level, used, others))
    return out


def _spread_lines(e: Explanation) -> list[str]:
    if not e.spread:
        return []
    n = len(e.replicas)

    def count(level: SpreadLevel) -> str:
        k = len(level.used)
        return f"{k} {level.name}{'s' if k != 1 else ''} ({', '.join(level.used)})"

    lines = [f"Spread: {n} replicas on {', '.join(count(level) for level in e.spread)}."]
    for level in e.spread:
        if level.not_further:
            lines.append(f"  Not on more {level.name}s:")
            lines.extend(f"    {node}: {why.removeprefix(node + ': ')}" for node, why in level.not_further[:8])
            if len(level.not_further) > 8:
                lines.append(f"    ... and {len(level.not_further) - 8} more")
        elif len(level.used) < n:
            lines.append(f"  Not on more {level.name}s: there are no others.")
    return lines


def describe_profile(p: Profile) -> str:
    parts = [p.engine, f"{p.nodes} node{'s' if p.nodes != 1 else ''} x {p.gpus} GPU{'s' if p.gpus != 1 else ''}"]
    if p.gpu_class:
        parts.append(p.gpu_class)
    if p.min_memory_gb:
        parts.append(f">= {p.min_memory_gb:g} GB memory")
    if p.node_selector:
        parts.append("node_selector " + ", ".join(f"{k}={v}" for k, v in sorted(p.node_selector.items())))
    return ", ".join(parts)


def _verdict_line(v: Verdict, chosen: list[str], stale: set[str], multi: bool) -> str:
    mark = " (stale facts: its last good ones were used)" if v.node in stale else ""
    if v.reason is not None:
        return f"    {v.reason}{mark}"
    if v.fabric is not None:
        return f"    fabric {v.fabric}: enough nodes free"
    assert v.node is not None
    if v.node in chosen:
        return f"    {v.node}: chosen{mark}"
    return f"    {v.node}: fits{' a shard' if multi else ''}{mark}"


def _attempt_lines(model: Model, attempt: Attempt, stale: set[str]) -> list[str]:
    lines = [f"Placing {attempt.replica}:"]
    tried = {name: (vs, chosen) for name, vs, chosen in attempt.profiles}
    winner = next((name for name, _, chosen in attempt.profiles if chosen), None)
    for p in model.profiles:
        if p.name not in tried:
            lines.append(f"  profile {p.name} ({describe_profile(p)}): not tried; {winner} placed the replica")
            continue
        vs, chosen = tried[p.name]
        verdict = "placed it" if chosen else "no node fits"
        lines.append(f"  profile {p.name} ({describe_profile(p)}): {verdict}")
        lines.extend(_verdict_line(v, chosen, stale, p.nodes > 1) for v in vs)
    return lines


def _level(s: PlannedShard) -> str:
    """Why those GPUs (llmgw.planner.topology): the level they share, and their NUMA node."""
    t = s.topology
    if t is None or t.level is None:
        return ""
    return f" on {t.level}" + (f" (NUMA node {t.numa_node})" if t.numa_node is not None else "")


def _where(r: PlannedReplica) -> str:
    shards = "; ".join(f"{s.node} GPUs [{', '.join(map(str, s.gpus))}]{_level(s)} port {s.port}" for s in r.shards)
    return f"{r.id} on {shards}, profile {r.profile}"


def render_explanation(e: Explanation) -> str:
    m = e.model
    head = m.name + (f" (aliases: {', '.join(m.aliases)})" if m.aliases else "")
    s = m.scaling
    out = [f"{head}: scaling min {s.min}, max {s.maximum}."]
    replicas = e.replicas
    status = e.status
    if status == "on demand":
        out.append(f"On demand: the plan places no replica; a router starts one on the first request "
                   f"(at most {s.maximum}). Placement is never attempted by the plan.")
    elif status == "placed":
        out.append(f"Placed: {len(replicas)} replica{'s' if len(replicas) != 1 else ''}.")
    else:
        u = next(u for u in e.plan.unplaced if u.model == m.name)
        if status == "not moved":
            out.append(f"Placed: {u.placed} of {u.wanted} replicas, but no node takes the replacement of "
                       f"{', '.join(nm.replica for nm in u.not_moved)}:")
        else:
            out.append(f"Not placed: {u.placed} of {u.wanted} replicas placed.")
        out.extend(f"  {nm.replica}: {nm.reason}" for nm in u.not_moved)
    for r in replicas:
        how = "new in this plan" if r.status == "new" else "runs there now (kept)"
        out.append(f"  {_where(r)}: {how}")
    out.extend(_spread_lines(e))
    for a in e.trace.attempts:
        out.append("")
        out.extend(_attempt_lines(m, a, e.trace.stale))
    if not e.trace.attempts:
        out.append("")
        if status != "on demand":
            out.append("No placement was attempted: every replica the catalog asks for already runs.")
        out.append("Where another replica would go now:")
        for p in m.profiles:
            out.append(f"  profile {p.name} ({describe_profile(p)}):")
            out.extend(_verdict_line(v, [], e.trace.stale, p.nodes > 1)
                       for v in e.trace.final_verdicts.get(p.name, []))
    if e.plan.notes:
        out += ["", "Notes:", *(f"  {n}" for n in e.plan.notes)]
    return "\n".join(out) + "\n"


def _verdict_json(v: Verdict, chosen: list[str]) -> dict[str, Any]:
    return {"node": v.node, "fabric": v.fabric, "fits": v.reason is None, "reason": v.reason,
            "chosen": v.node is not None and v.node in chosen}


def explanation_json(e: Explanation) -> dict[str, Any]:
    m = e.model
    return {
        "model": m.name,
        "aliases": list(m.aliases),
        "scaling": {"min": m.scaling.min, "max": m.scaling.maximum},
        "status": e.status,
        "replicas": [r.model_dump(mode="json") for r in e.replicas],
        "attempts": [{"replica": a.replica,
                      "profiles": [{"profile": name, "chosen": chosen,
                                    "verdicts": [_verdict_json(v, chosen) for v in vs]}
                                   for name, vs, chosen in a.profiles]}
                     for a in e.trace.attempts],
        "now": {name: [_verdict_json(v, []) for v in vs] for name, vs in e.trace.final_verdicts.items()},
        "unplaced": [u.model_dump(mode="json") for u in e.plan.unplaced if u.model == m.name],
        "spread": {"hosts": next((lv.used for lv in e.spread if lv.name == "host"), []),
                   "levels": [{"level": lv.name, "used": lv.used,
                               "not_further": [{"node": n, "reason": why} for n, why in lv.not_further]}
                              for lv in e.spread],
                   "not_further": [{"level": lv.name, "node": n, "reason": why}
                                   for lv in e.spread for n, why in lv.not_further]},
        "notes": list(e.plan.notes),
    }
