"""Per replica: where its shards run, its state, age, idle time, endpoint, and what is wrong.

Errors come from three places, each named in its sentence: the routers (a failed health
check or request), the facts (a shard's unit failed or is gone from its host), and the
inventory (a shard's node is gone). A download still in progress (the weights module's
`.<name>.progress` file: bytes, and the total when the source said it) shows as a line
under its replica; facts do not carry progress yet, so callers that fetched it hand it in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from llmgw.state import Replica, replica_sort_key
from llmgw.views.runtime import Runtime
from llmgw.views.sitedata import SiteData
from llmgw.views.text import NEVER, UNKNOWN, duration, human_bytes, percent


def shard_text(node: str, gpus: list[int]) -> str:
    """`gpu-node-01:0-3` for contiguous GPUs, `gpu-node-01:0,2,5` otherwise, `cpu-01` for none."""
    if not gpus:
        return node
    g = sorted(gpus)
    if len(g) > 2 and g == list(range(g[0], g[-1] + 1)):
        return f"{node}:{g[0]}-{g[-1]}"
    return f"{node}:{','.join(map(str, g))}"


def download_text(progress: Mapping[str, Any]) -> str:
    """`3.0 GiB of 9.0 GiB (33%)`, then the rate and time left when apply's feed knows them."""
    done = int(progress.get("bytes") or 0)
    total = progress.get("total")
    if isinstance(total, int) and total > 0:
        text = f"{human_bytes(done)} of {human_bytes(total)} ({percent(done, total):.0f}%)"
    else:
        text = f"{human_bytes(done)} so far (size not known)"
    if isinstance(progress.get("rate"), int | float):
        text += f", {human_bytes(int(progress['rate']))}/s"
    if isinstance(progress.get("eta_seconds"), int | float):
        text += f", {duration(float(progress['eta_seconds']))} left"
    return text


def _errors(data: SiteData, r: Replica, rt: Mapping[str, Any] | None, runtime: Runtime) -> list[str]:
    out: list[str] = []
    nodes = data.inventory.nodes
    for s in sorted(r.shards, key=lambda s: s.rank):
        if s.node not in nodes:
            out.append(f"shard {s.rank}: node {s.node} is gone from the inventory")
            continue
        f = data.facts.get(s.node)
        if f is None or f.units is None or f.stale:
            continue
        unit = next((u for u in f.units if u.name == s.unit), None)
        if unit is None:
            if r.created_at is None or f.gathered_at > r.created_at:
                out.append(f"shard {s.rank}: unit {s.unit} is not on {s.node} (facts of "
                           f"{f.gathered_at.isoformat(timespec='minutes')})")
        elif unit.active_state == "failed":
            out.append(f"shard {s.rank}: unit {s.unit} failed on {s.node} (`llmgw logs {r.id}`)")
    if runtime.known and rt is None:
        out.append("the routers do not know this replica (are they on an older state?)")
    if rt is not None and rt.get("health") == "unhealthy":
        why = rt.get("last_error") or "health check failed"
        out.append(f"unhealthy at the router: {why}")
    return out


def replica_activity(data: SiteData, r: Replica, runtime: Runtime, now: datetime) -> dict[str, Any]:
    """What a replica is doing and what is wrong with it: what `llmgw status` counts and lists
    of each replica (at 4,096 hosts, 10,000 of them); `replica_record` adds where it runs."""
    rt = runtime.replica(r.id)
    age = None if r.created_at is None else (now - r.created_at).total_seconds()
    in_flight = int(rt.get("in_flight") or 0) if rt else (0 if runtime.known else None)
    if not runtime.known or (not runtime.complete and not in_flight):
        # A router that did not answer may have sent it requests: not idle as far as we know.
        used: bool | None = None
        idle: float | None = None
    else:
        used = rt is not None and rt.get("last_used") is not None
        idle = float(rt["idle_seconds"]) if rt is not None and rt.get("idle_seconds") is not None else None
    return {
        "id": r.id, "model": r.model, "state": r.state,
        "age_seconds": age,
        "used": used,
        "idle_seconds": idle,
        "last_used": rt.get("last_used") if rt else None,
        "in_flight": in_flight,
        "in_flight_partial": runtime.known and not runtime.complete,  # the answering routers' share only
        "health": rt.get("health") if rt else None,
        "errors": _errors(data, r, rt, runtime),
    }


def replica_record(data: SiteData, r: Replica, runtime: Runtime, now: datetime,
                   downloads: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, Any]:
    # A state from before replicas kept their entry: the catalog model's (none for one that left it)
    name = r.cache_name or data.cache_names.get(r.model)
    shards = sorted(r.shards, key=lambda s: s.rank)
    dl = []
    if name is not None:
        for s in shards:
            p = downloads.get((s.node, name))
            if p is not None:
                dl.append({"node": s.node, "bytes": int(p.get("bytes") or 0), "total": p.get("total"),
                           "rate": p.get("rate"), "eta_seconds": p.get("eta_seconds"),
                           "percent": percent(int(p.get("bytes") or 0), int(p["total"]))
                           if isinstance(p.get("total"), int) and p["total"] else None,
                           "text": f"downloading on {s.node}: {download_text(p)}"})
    return {
        **replica_activity(data, r, runtime, now),
        "profile": r.profile, "engine": r.engine, "endpoint": r.endpoint,
        "shards": [{"node": s.node, "rank": s.rank, "gpus": list(s.gpus), "port": s.port, "unit": s.unit,
                    "text": shard_text(s.node, list(s.gpus))} for s in shards],
        "created_at": r.created_at.isoformat() if r.created_at else None,
        "downloads": dl,
    }


def in_order(replicas: Iterable[Replica]) -> list[Replica]:
    """Replicas as the views list them: by model, then replica number (the plan's order)."""
    return sorted(replicas, key=lambda r: replica_sort_key(r.id, r.model))


def idle_text(rec: Mapping[str, Any]) -> str:
    if rec["used"] is None:
        return UNKNOWN
    if not rec["used"]:
        return NEVER
    return duration(rec["idle_seconds"])


def replicas_view(data: SiteData, runtime: Runtime, now: datetime, *, model: str | None = None,
                  downloads: Mapping[tuple[str, str], Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Every replica in the state (of one model, when given: a name or an alias)."""
    wanted = None
    if model is not None:
        m = data.catalog.resolve(model)
        wanted = m.name if m is not None else model
    records = [replica_record(data, r, runtime, now, downloads or {}) for r in in_order(data.state.replicas)
               if wanted is None or r.model == wanted]
    notes = list(runtime.problems)
    if not runtime.known and not runtime.problems:  # else the problems say why
        notes.append("idle times and in-flight counts are not known: no router answered")
    elif runtime.known and not runtime.complete:
        notes.append(f"idle times are not known while {', '.join(runtime.missing)} does not answer; "
                     "in-flight counts are those of the routers that answered")
    return {"serial": data.state.serial, "model": wanted, "replicas": records, "notes": notes}
