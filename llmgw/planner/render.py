"""The plan for people, shaped like terraform's: scripts and operators both read these lines.

A legend of only the actions present, one block per change, then
`Plan: N to add, N to change, N to destroy.` or `No changes. The fleet matches the catalog.`,
then what cannot be placed and why. Golden tests pin the wording.
"""

from __future__ import annotations

from llmgw.planner.schema import Action, Plan, PlannedReplica, PlannedShard, Unplaced
from llmgw.state import Replica, Shard, State

NO_CHANGES = "No changes. The fleet matches the catalog."
REJECTIONS_SHOWN = 20

_LEGEND = {
    "create": "  + create",
    "update": "  ~ update in-place (the routers' view of a model)",
    "replace": "-/+ replace (create the new one, then drain and destroy the old)",
    "destroy": "  - destroy (drain first)",
}
_SYMBOL = {"create": "  +", "update": "  ~", "replace": "-/+", "destroy": "  -"}


def summary_line(plan: Plan) -> str:
    if not plan.has_changes:
        return NO_CHANGES
    s = plan.summary
    return f"Plan: {s.add} to add, {s.change} to change, {s.destroy} to destroy."


def _shard(s: PlannedShard | Shard) -> str:
    gpus = ", ".join(str(g) for g in s.gpus)
    # An operator's copy served where it is: review sees which file, and that nothing is fetched.
    at = s.present_at if isinstance(s, PlannedShard) else None
    return f'"{s.node}" gpus [{gpus}] port {s.port}' + (f' weights in place "{at}"' if at else "")


def _topology(s: PlannedShard) -> str | None:
    """Why the shard got those GPUs and what goes with them (llmgw.planner.topology), or None."""
    t = s.topology
    if t is None or (t.level is None and t.ib_hcas is None and not t.numa_bind):
        return None
    parts = []
    if t.level is not None:
        parts.append(f"GPUs on {t.level}" + (f" (NUMA node {t.numa_node})" if t.numa_node is not None else ""))
    if t.ib_hcas is not None:
        parts.append(f"NCCL_IB_HCA {','.join(t.ib_hcas)}" + (f" ({t.ib_why})" if t.ib_why else ""))
    if t.numa_bind:
        parts.append(f"CPUs and memory bound to NUMA node {t.numa_node}")
    return '"' + "; ".join(parts) + '"'


def _q(text: str | None) -> str | None:
    return None if text is None else f'"{text}"'


def _replica_lines(new: PlannedReplica | None, old: Replica | None) -> list[str]:
    def pair(a: str | None, b: str | None) -> str:
        if a is None:
            return b or ""
        if b is None or a == b:
            return a
        return f"{a} -> {b}"

    lines = []
    ref = new or old
    assert ref is not None
    rows: list[tuple[str, str | None, str | None]] = [("model", f'"{ref.model}"', f'"{ref.model}"'),
            ("profile", _q(old.profile if old else None), _q(new.profile if new else None)),
            ("engine", _q(old.engine if old else None), _q(new.engine if new else None)),
            ("endpoint", _q(old.endpoint if old else None), _q(new.endpoint if new else None))]
    if new is not None and new.fabric:
        rows.append(("fabric", None, f'"{new.fabric}"'))
    if new is not None and new.trust_remote_code:  # a widening of trust review must see
        rows.append(("trust", None, '"runs the model\'s own code (trust_remote_code)"'))
    was = [a.name for a in old.adapters] if old else []
    now = [a.name for a in new.adapters or []] if new else []
    if was or now:  # LoRA adapters its engine loads (docs/adapters.md)
        rows.append(("adapters", _q(", ".join(was)) if old else None, _q(", ".join(now)) if new else None))
    olds = {s.rank: s for s in old.shards} if old else {}
    news = {s.rank: s for s in new.shards} if new else {}
    for rank in sorted(set(olds) | set(news)):
        o, n = olds.get(rank), news.get(rank)
        rows.append((f"shard {rank}", _shard(o) if o else None, _shard(n) if n else None))
        if n is not None and (where := _topology(n)):
            rows.append((f"  placed {rank}", None, where))
    width = max(len(k) for k, _, _ in rows)
    for key, a, b in rows:
        lines.append(f"      {key.ljust(width)} = {pair(a, b)}")
    return lines


def _unreached(a: Action) -> list[str]:
    """The line saying a lost node's units go from the state only (apply cannot reach it)."""
    if not a.unreached:
        return []
    return [f"  # on {', '.join(a.unreached)} (lost): removed from the state only; the host is not contacted"]


def _block(a: Action, new_by_id: dict[str, PlannedReplica], old_by_id: dict[str, Replica]) -> list[str]:
    new = new_by_id.get(a.replica or "") if a.action != "destroy" else None
    sym = _SYMBOL[a.action]
    if a.action == "update":
        return [f"  # model {a.model} will be updated in-place: {a.reason}", f'{sym} model "{a.model}"', ""]
    if a.action == "create":
        return [f"  # {a.replica} will be created: {a.reason}", f'{sym} replica "{a.replica}" {{',
                *_replica_lines(new, None), "    }", ""]
    if a.action == "replace":
        old = old_by_id.get(a.replaces or "")
        return [f"  # {a.replaces} must be replaced by {a.replica}: {a.reason}", *_unreached(a),
                f'{sym} replica "{a.replaces}" -> "{a.replica}" {{', *_replica_lines(new, old), "    }", ""]
    if a.stray:
        units = [f'      unit = "{u.unit}" on "{u.node}"' for u in a.units]
        return [f"  # units of {a.replica} will be destroyed: {a.reason}", f'{sym} units "{a.replica}" {{',
                *units, "    }", ""]
    old = old_by_id.get(a.replica or "")
    body = _replica_lines(None, old) if old else [f'      unit = "{u.unit}" on "{u.node}"' for u in a.units]
    return [f"  # {a.replica} will be destroyed: {a.reason}", *_unreached(a), f'{sym} replica "{a.replica}" {{',
            *body, "    }", ""]


def _unplaced_lines(u: Unplaced, limit: int | None) -> list[str]:
    lines = [f"  {u.model}: {u.placed} of {u.wanted} replica{'s' if u.wanted != 1 else ''} placed"]
    by_profile: dict[str, list[str]] = {}
    for r in u.rejections:
        by_profile.setdefault(r.profile, []).append(r.reason)
    for profile, reasons in by_profile.items():
        lines.append(f"    profile {profile}:")
        shown = reasons if limit is None else reasons[:limit]
        lines.extend(f"      {why}" for why in shown)
        if len(reasons) > len(shown):
            lines.append(f"      ... and {len(reasons) - len(shown)} more (`llmgw explain {u.model}` lists every node)")
    for nm in u.not_moved:
        lines.append(f"    {nm.replica}: {nm.reason}")
    return lines


def render_plan(plan: Plan, state: State, *, limit: int | None = REJECTIONS_SHOWN) -> str:
    """The whole human-readable plan, ending in a newline."""
    out: list[str] = [f"Planned against state serial {plan.state_serial}.", ""]
    if plan.has_changes:
        present = {a.action for a in plan.actions}
        out.append("Actions are shown with these symbols:")
        out.extend(line for kind, line in _LEGEND.items() if kind in present)
        out += ["", "llmgw will perform the following actions:", ""]
        # Looked up by id once: thousands of actions each scanning every replica was quadratic.
        new_by_id = {r.id: r for r in plan.desired.replicas}
        old_by_id: dict[str, Replica] = {}
        for r in state.replicas:
            old_by_id.setdefault(r.id, r)  # the first, as State.replica finds it
        for a in plan.actions:
            out.extend(_block(a, new_by_id, old_by_id))
        kept = sum(r.status == "kept" for r in plan.desired.replicas)
        if kept:
            out += [f"  # ({kept} unchanged replica{'s' if kept != 1 else ''} hidden)", ""]
    out.append(summary_line(plan))
    if plan.unplaced:
        out += ["", "Models that cannot be placed:"]
        for u in plan.unplaced:
            out.extend(_unplaced_lines(u, limit))
    if plan.on_demand:
        items = ", ".join(f"{o.model} (max {o.max}, {o.running} running)" for o in plan.on_demand)
        out += ["", f"On demand, started by the first request: {items}."]
    if plan.notes:
        out += ["", "Notes:", *(f"  {n}" for n in plan.notes)]
    return "\n".join(out) + "\n"
