"""Per model: who answers a request now, replicas ready of min, and one status word.

The status word decides what the operator does next:

    ready       at least `scaling.min` replicas are ready            nothing
    starting    replicas exist, fewer than min are ready yet         wait
    not placed  the plan cannot place what min asks for              `llmgw explain MODEL`
    not moved   enough replicas, but one the plan would move (off a  `llmgw explain MODEL`
                draining node, to a new definition) stays: no node
                takes its replacement
    stopped     nothing runs, and the plan would place it            `llmgw apply`
    on demand   min 0: a router starts one on the first request      nothing

Weighted routes (catalog `routes:`, docs/routes.md) are listed apart (`routes_view`): each
target's catalog weight, the share the routers give it now and its guard's state, as the
routers' Runtime reports them; "not known" whenever a router did not say.

Placement failures are the plan's own `unplaced` entries (planned on the bastion, shipped to
a router's dashboard by apply: llmgw.views.placement) with every rejection, and a
one-line summary for places that have room for one line only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from llmgw.catalog import Model, Route, format_duration
from llmgw.views.placement import Unplaced
from llmgw.views.runtime import Runtime
from llmgw.views.sitedata import SiteData

STATUSES = ("ready", "starting", "not placed", "not moved", "stopped", "on demand")


def short_of(u: Unplaced) -> bool:
    """Whether the plan places fewer replicas than it wants (else it only could not move some)."""
    return u.placed < u.wanted


def _binding(u: Unplaced) -> str | None:
    """The rejection that binds: a fabric-wide one when there is one, else the commonest
    node rejection (without the node's name), with how many nodes said it."""
    fabric = [r.reason for r in u.rejections if r.fabric is not None]
    if fabric:
        return fabric[0]
    reasons = Counter(r.reason.split(": ", 1)[1] if r.node and r.reason.startswith(f"{r.node}: ") else r.reason
                      for r in u.rejections)
    if not reasons:
        return None
    text, n = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    nodes = len({r.node for r in u.rejections if r.node})
    return f"{text} ({n} of {nodes} nodes)" if nodes > 1 else text


def not_moved_reason(u: Unplaced, replica: str) -> str:
    """Why `replica` stays where the plan would move it from: its own reason first (a drain,
    a changed definition), then what keeps its replacement off every other node."""
    nm = next(n for n in u.not_moved if n.replica == replica)
    binding = _binding(u)
    return f"{nm.reason}; no node takes a replacement: {binding}" if binding else nm.reason


def summary_reason(u: Unplaced) -> str:
    """One line for places that have room for one: what binds for a model short of replicas;
    for one that only could not move a replica, why that replica stays."""
    if u.not_moved and not short_of(u):
        first = u.not_moved[0]
        more = f" (and {len(u.not_moved) - 1} more)" if len(u.not_moved) > 1 else ""
        return f"{first.replica}: {not_moved_reason(u, first.replica)}{more}"
    binding = _binding(u)
    if binding is None:
        return u.not_moved[0].reason if u.not_moved else "no node fits"
    return binding


def placement_failures(data: SiteData) -> list[dict[str, Any]]:
    out = []
    for u in data.placement.unplaced:
        profiles: dict[str, list[dict[str, Any]]] = {}
        for r in u.rejections:
            profiles.setdefault(r.profile, []).append(
                {"node": r.node, "fabric": r.fabric, "reason": r.reason})
        out.append({"model": u.model, "wanted": u.wanted, "placed": u.placed, "summary": summary_reason(u),
                    "profiles": [{"profile": p, "rejections": rs} for p, rs in profiles.items()],
                    "not_moved": [n.model_dump(mode="json") for n in u.not_moved],
                    "explain": f"llmgw explain {u.model}"})
    return out


def _status(m: Model, counts: Mapping[str, int], unplaced: Unplaced | None) -> str:
    if m.scaling.min == 0:
        return "on demand"
    if unplaced is not None:
        return "not placed" if short_of(unplaced) else "not moved"
    if counts["ready"] >= m.scaling.min:
        return "ready"
    if counts["ready"] or counts["starting"]:
        return "starting"
    return "stopped"


def models_view(data: SiteData, runtime: Runtime) -> dict[str, Any]:
    """Every catalog model, in name order, with the placement failures of the plan."""
    unplaced = {u.model: u for u in data.placement.unplaced}
    by_model: dict[str, list[Any]] = {}
    for r in data.state.replicas:
        by_model.setdefault(r.model, []).append(r)

    def answering(name: str) -> int:
        """Ready replicas the routers do not call unhealthy."""
        n = 0
        for r in by_model.get(name, []):
            rt = runtime.replica(r.id)
            if r.state == "ready" and not (rt is not None and rt.get("health") == "unhealthy"):
                n += 1
        return n

    records = []
    # What `catalog validate` recorded of each source: the commit a whole repository is pinned
    # to, and the weights' size (None: not inspected yet, or the server did not say); read on
    # the bastion, shipped to the routers in their placement.
    pins = data.placement.pins
    for m in data.catalog:
        info = pins.get(m.name)
        reps = by_model.get(m.name, [])
        counts = {s: sum(1 for r in reps if r.state == s) for s in ("starting", "ready", "draining")}
        status = _status(m, counts, unplaced.get(m.name))
        serving = answering(m.name)
        if serving:
            serving_text = "yes"
        else:
            via = next((fb for fb in m.fallbacks if answering(fb)), None)
            serving_text = (f"via {via}" if via else "on request" if m.scaling.min == 0 else "no")
        rts = [runtime.replica(r.id) for r in reps]
        in_flight = sum(int(rt.get("in_flight") or 0) for rt in rts if rt) if runtime.known else None
        used = sorted(str(rt["last_used"]) for rt in rts if rt and rt.get("last_used"))
        records.append({
            **m.model_dump(mode="json"),  # the catalog entry as written: name, aliases, scaling, profiles...
            "min": m.scaling.min, "max": m.scaling.maximum,
            "idle_timeout_text": format_duration(m.scaling.idle_timeout),
            "replicas": {**counts, "total": len(reps)},
            "replicas_text": f"{counts['ready']}/{m.scaling.min}",
            "serving": serving_text, "status": status,
            "hint": f"llmgw explain {m.name}" if status in ("not placed", "not moved")
            else "llmgw apply" if status == "stopped" else None,
            "in_flight": in_flight, "last_used": used[-1] if used else None,
            "commit": info.commit if info else None, "weights_bytes": info.size_bytes if info else None,
        })
    counts_by_status = Counter(r["status"] for r in records)
    return {"models": records, "counts": {s: counts_by_status.get(s, 0) for s in STATUSES},
            "failures": placement_failures(data), "notes": list(runtime.problems)}


def guard_text(route: Route) -> str | None:
    """The route's guard in words: what the router watches each canary for."""
    g = route.guard
    if g is None:
        return None
    limits = ([f"errors above {g.max_error_rate * 100:g}%"] if g.max_error_rate is not None else []) + \
        ([f"TTFT p90 above {g.max_ttft_p90:g} s"] if g.max_ttft_p90 is not None else [])
    return f"{' or '.join(limits)} over {format_duration(g.window)} (at least {g.min_requests} requests)"


def _route_row(route: Route, runtime: Runtime) -> dict[str, Any]:
    reported = None if runtime.routes is None else runtime.routes.get(route.name)
    if not runtime.known:
        why = "no router answered"
    elif runtime.missing:  # a silent router may have tripped the canary, and splits as it does
        why = f"not every router answered ({', '.join(runtime.missing)})"
    elif runtime.routes is None:
        why = "the routers did not report their routes"
    elif reported is None:
        why = "the routers do not route it yet (apply the catalog)"
    else:
        why = None
    by_model = {str(t["model"]): t for t in (reported or {}).get("targets") or ()} if why is None else {}
    targets = []
    for t in route.routes:
        rt = by_model.get(t.model)
        known = why is None and rt is not None
        tripped = bool(rt["tripped"]) if known and rt is not None else None
        targets.append({
            "model": t.model, "weight": t.weight, "stable": t.model == route.stable,
            "share": rt["share"] if known and rt is not None else None,
            "tripped": tripped,
            "reason": rt.get("reason") if tripped and rt is not None else None,
            "since": rt.get("tripped_at") if tripped and rt is not None else None,
        })
    if why is not None or any(t["tripped"] is None for t in targets):
        state = "not known"
    elif any(t["tripped"] for t in targets):
        state = "tripped"
    else:
        state = "holding" if route.guard is not None else "no guard"
    return {"name": route.name, "aliases": list(route.aliases), "fallbacks": list(route.fallbacks),
            "stable": route.stable, "guard": guard_text(route), "state": state,
            "not_known": why, "targets": targets}


def routes_view(data: SiteData, runtime: Runtime) -> list[dict[str, Any]]:
    """Every weighted route of the catalog, in name order: targets in the catalog's order, each
    with its weight and, as the routers report it, its share now and whether the guard tripped it
    (since when and why). Nothing the routers did not say is guessed: it is None."""
    return [_route_row(r, runtime) for _, r in sorted(data.catalog.routes.items())]
