"""`llmgw status` and the dashboard's overview: the fleet in aggregates.

- capacity per GPU class: used (held by a replica), free (healthy, unheld, on a ready
  node), held back (healthy and unheld, on a cordoned or draining node), unhealthy
  (neither used nor free, whoever holds it); nodes whose GPUs are not known are listed,
  not counted as zero;
- free whole nodes per fabric: ready nodes with every GPU healthy and unheld, the unit a
  multi-node replica is placed in;
- nodes by state, and those that stopped answering (unreachable, lost: llmgw.nodetime);
- each drain: until when, and the replicas it waits to move (or destroys past its deadline);
- replica counts by state, model counts by status word, the models the plan cannot place,
  and the replicas it would move but cannot (each with why it stays);
- idle replicas: those nobody has used for `idle_after` seconds, by the scaler's own
  definition (llmgw.idle: only once the routers have watched them that long; the rest are
  `idle_not_known`), known only when every router answered;
- per replica, in flight now and idle for how long (`live`), as the routers that answered
  see it, and which routers did not answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from llmgw.gpus import gpu_left_out
from llmgw.idle import idle_verdict
from llmgw.nodetime import liveness
from llmgw.views.defaults import IDLE_AFTER
from llmgw.views.held import per_fabric
from llmgw.views.models import models_view, not_moved_reason
from llmgw.views.nodes import gpu_holders, replicas_by_node
from llmgw.views.replicas import in_order, replica_activity
from llmgw.views.runtime import Runtime
from llmgw.views.sitedata import SiteData
from llmgw.views.text import iso, percent


def capacity(data: SiteData, holders: dict[str, dict[int, str]]) -> tuple[list[dict[str, Any]], list[str]]:
    classes: dict[str, dict[str, Any]] = {}
    unknown = []
    for name, host in sorted(data.inventory.nodes.items()):
        f = data.facts.get(name)
        if f is None or f.gpus is None:
            unknown.append(name)
            continue
        held = holders.get(name, {})
        for g in f.gpus:
            c = classes.setdefault(g.gpu_class, {"gpu_class": g.gpu_class, "total": 0, "used": 0, "free": 0,
                                                 "held_back": 0, "unhealthy": 0, "nodes": set()})
            c["total"] += 1
            c["nodes"].add(name)
            if not g.healthy:
                c["unhealthy"] += 1
            elif g.index in held:
                c["used"] += 1
            elif host.node_state == "ready" and gpu_left_out(g, host, f.fabric_manager) is None:
                c["free"] += 1
            else:  # on a cordoned or draining node, or a GPU placement leaves out (cordoned, health unknown)
                c["held_back"] += 1
    out = []
    for c in sorted(classes.values(), key=lambda c: c["gpu_class"]):
        c["nodes"] = len(c["nodes"])
        c["used_percent"] = percent(c["used"], c["total"])
        out.append(c)
    return out, unknown


def whole_nodes(data: SiteData, holders: dict[str, dict[int, str]]) -> list[dict[str, Any]]:
    # One pass over the nodes for every fabric (a pass per fabric asked each node its fabrics again).
    members: dict[str, list[str]] = {fid: [] for fid in data.fabric_map.glances}
    free: dict[str, list[str]] = {fid: [] for fid in members}
    classes: dict[str, set[str]] = {fid: set() for fid in members}
    for n, host in sorted(data.inventory.nodes.items()):
        fids = [fid for fid in data.fabric_map.fabrics_of(n) if fid in members]
        if not fids:
            continue
        f = data.facts.get(n)
        gpus = (f.gpus or []) if f is not None else []
        whole = (host.node_state == "ready" and bool(gpus) and not holders.get(n)
                 and all(g.healthy and gpu_left_out(g, host, f.fabric_manager if f else None) is None
                         for g in gpus))
        for fid in fids:
            members[fid].append(n)
            classes[fid].update(g.gpu_class for g in gpus)
            if whole:
                free[fid].append(n)
    return [{"fabric": fid, "nodes": len(members[fid]), "free_whole_nodes": len(free[fid]), "free": free[fid],
             "gpu_classes": sorted(classes[fid]), "degraded_links": glance.degraded_links,
             "rails": glance.rails, "switches": glance.switches}
            for fid, glance in data.fabric_map.glances.items()]


def fabrics_list(data: SiteData) -> list[dict[str, Any]]:
    """Every fabric's summary, its inventory nodes, and which models' weights how many of them hold."""
    held = data.held
    out = []
    for row in data.fabrics.rows():
        nodes = sorted(h for h in row["hosts"] if h in data.inventory.nodes)
        out.append({"id": row["id"], "source": row["source"], **row["summary"], "nodes": nodes,
                    "weights": per_fabric(held, nodes)})
    return out


def drains(data: SiteData, replicas: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Each draining node: until when, and what it waits for: the replicas no other node can
    take yet (they stay until the deadline), and those the plan destroys as it has passed."""
    placement, now = data.placement, data.clock
    waiting = {nm.replica for u in placement.unplaced for nm in u.not_moved if nm.code == "node_draining"}
    doomed, moving = set(placement.destroyed_at_deadline), set(placement.moving)
    out = []
    for name, host in sorted(data.inventory.nodes.items()):
        if host.node_state != "draining":
            continue
        end = host.drain_deadline
        here = replicas.get(name, [])
        out.append({"node": name, "deadline": iso(end) if end else None,
                    "deadline_passed": None if end is None or now is None else now >= end,
                    "replicas": here, "moving": [r for r in here if r in moving],
                    "waiting": [r for r in here if r in waiting and r not in doomed],
                    "destroyed_at_deadline": [r for r in here if r in doomed]})
    return out


def fabric_weights(data: SiteData, fabrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`fabrics` (whole_nodes) each with the models whose weights how many of its nodes hold."""
    held = data.held
    members: dict[str, list[str]] = {f["fabric"]: [] for f in fabrics}
    for n in data.inventory.nodes:
        for fid in data.fabric_map.fabrics_of(n):
            if fid in members:
                members[fid].append(n)
    return [{**f, "weights": per_fabric(held, members[f["fabric"]])} for f in fabrics]


def status_view(data: SiteData, runtime: Runtime, now: datetime, *, idle_after: float = IDLE_AFTER) -> dict[str, Any]:
    holders = gpu_holders(data)
    caps, unknown = capacity(data, holders)
    config = data.site.config
    silent = {n: lv.condition for n in sorted(data.inventory.nodes)
              if (lv := liveness(data.facts.get(n), data.clock, config.unreachable_after, config.lost_after))}
    models = models_view(data, runtime)
    reps = [replica_activity(data, r, runtime, now) for r in in_order(data.state.replicas)]
    nodes = data.inventory.nodes
    node_counts = {s: sum(1 for h in nodes.values() if h.node_state == s) for s in ("ready", "cordoned", "draining")}
    idle: list[dict[str, Any]] | None = None
    idle_not_known: list[dict[str, Any]] | None = None
    if runtime.complete:  # with a router silent, a replica quiet here may be busy there
        idle, idle_not_known = [], []
        for r in reps:
            if r["state"] != "ready":
                continue
            # The scaler's own definition (llmgw.idle): idle only once the routers watched it that long.
            watched = (runtime.replica(r["id"]) or {}).get("watched_seconds")
            verdict = idle_verdict(r["idle_seconds"], watched, r["age_seconds"], idle_after)
            if verdict == "idle":
                idle.append({"id": r["id"], "model": r["model"], "used": r["used"], "idle_seconds": r["idle_seconds"],
                             "age_seconds": r["age_seconds"], "watched_seconds": watched})
            elif verdict == "not known yet":
                idle_not_known.append({"id": r["id"], "model": r["model"], "watched_seconds": watched})
    notes = list(data.notes) + list(data.placement.notes) + list(runtime.problems) + list(runtime.notes)
    if not runtime.known and not runtime.problems:  # else the problems say why
        notes.append("idle replicas are not known: no router answered")
    live = None
    if runtime.known:  # what each replica is doing now, as the routers that answered see it
        live = [{"id": r["id"], "model": r["model"], "state": r["state"], "in_flight": r["in_flight"],
                 "used": r["used"], "idle_seconds": r["idle_seconds"], "health": r["health"]} for r in reps]
    return {
        "serial": data.state.serial,
        "capacity": caps,
        "gpus_unknown": unknown,
        "fabrics": fabric_weights(data, whole_nodes(data, holders)),
        "nodes": {"total": len(nodes), **node_counts,
                  "stale": sorted(n for n in nodes if n in data.facts and data.facts[n].stale),
                  # stopped answering (llmgw.nodetime): unreachable take nothing new; lost are replaced
                  "unreachable": [n for n, c in silent.items() if c == "unreachable"],
                  "lost": [n for n, c in silent.items() if c == "lost"],
                  "no_facts": sorted(n for n in nodes if n not in data.facts)},
        "replicas": {"total": len(reps), **{s: sum(1 for r in reps if r["state"] == s)
                                            for s in ("ready", "starting", "draining")},
                     "with_errors": sum(1 for r in reps if r["errors"])},
        "models": {"total": len(models["models"]), **models["counts"]},
        # Short of replicas; a model that only could not move one is under not_moved: its
        # rejections say where a replacement cannot go, not that the model cannot be placed.
        "unplaceable": [{"model": f["model"], "wanted": f["wanted"], "placed": f["placed"], "reason": f["summary"]}
                        for f in models["failures"] if f["placed"] < f["wanted"]],
        "not_moved": [{"model": u.model, "replica": nm.replica, "code": nm.code,
                       "reason": not_moved_reason(u, nm.replica)}
                      for u in data.placement.unplaced for nm in u.not_moved],
        "drains": drains(data, replicas_by_node(data)),
        "idle_after_seconds": idle_after,
        "idle": idle,
        "idle_not_known": idle_not_known,  # no request seen, but no router has watched them for idle_after
        "routers": list(runtime.routers),
        "routers_not_known": list(runtime.missing),
        "live": live,
        "in_flight": sum(int(r["in_flight"] or 0) for r in reps) if runtime.known else None,
        "notes": notes,
    }
