"""The router's admin and metrics listeners.

    admin    (FastAPI)    /api/v1/replicas, /api/v1/models, /api/v1/usage, /api/v1/status,
                          /metrics, /health, and the read-only dashboard when the router
                          has a site (every other path, relayed to the dashboard's own
                          process, dashboard_child.py) — loopback by default; Host-checked,
                          and its one change (POST /api/v1/downloads) takes the admin token
                          (admin_guard.py)
    metrics  (FastAPI)    /metrics and /metrics/engines (the engines' own, relayed) alone,
                          safe to expose

/metrics on both ends with the fleet gauges (fleet_gauges.py), from apply's site copy.

The dashboard reads the router's runtime facts and usage from this admin API, as
`llmgw status` does from the bastion: the router imports nothing of llmgw.web or
llmgw.views, and llmgw.web nothing of the router.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from llmgw.router.admin_guard import ADMIN_TOKEN_FILE, AdminGuard
from llmgw.router.app import Router, openai_errors
from llmgw.router.dashboard_child import DashboardChild
from llmgw.router.endpoints import served
from llmgw.router.engine_metrics import relay as relay_engine_metrics
from llmgw.router.fleet_gauges import FleetGauges
from llmgw.router.metrics import CONTENT_TYPE
from llmgw.router.openai_errors import error_payload
from llmgw.router.table import ModelEntry, ReplicaRuntime


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def replica_json(r: ReplicaRuntime, now: float) -> dict[str, Any]:
    """One replica for apply, `llmgw status` and the dashboard; `last_used` is absent when never used."""
    out: dict[str, Any] = {
        "id": r.id, "model": r.model, "profile": r.record.profile, "engine": r.record.engine,
        "state": r.state, "endpoint": r.endpoint, "health": r.health,
        "routable": r.routable(time.monotonic()), "in_flight": r.in_flight, "requests": r.requests,
        "consecutive_failures": r.failures,
    }
    by_worker = getattr(r, "in_flight_by_worker", None)  # several workers (shared.py): who holds what
    if by_worker is not None:
        out["in_flight_by_worker"] = by_worker
    if r.last_used is not None:
        out["last_used"] = _iso(r.last_used)
        out["idle_seconds"] = round(max(0.0, now - r.last_used), 3)
    # How long this router has watched the replica: no replica is known idle for longer (llmgw.idle).
    out["watched_seconds"] = round(max(0.0, time.monotonic() - r.first_seen), 3)
    if r.last_error is not None:
        out["last_error"] = r.last_error
    return out


async def _route_notes(router: Router) -> list[str]:
    """A line per canary a weighted route's guard tripped, in any worker (routes.py)."""
    trips = await router.route_trips()
    return [e.route.note(target) for e in router.table.models.values() if e.route is not None
            for target in sorted(trips.get(e.name, ()))]


def model_json(router: Router, e: ModelEntry, route_trips: set[str] | None = None) -> dict[str, Any]:
    now = time.monotonic()
    counts = {"starting": 0, "ready": 0, "draining": 0}
    for r in e.replicas:
        counts[r.state] += 1
    used = [r.last_used for r in e.replicas if r.last_used is not None]
    out: dict[str, Any] = {
        "name": e.name, "aliases": list(e.record.aliases), "fallbacks": list(e.record.fallbacks),
        "scaling": e.record.scaling.model_dump(), "routing": e.record.routing, "on_demand": e.on_demand,
        "available": router.answerable(e, now),
        "replicas": {**counts, "routable": len(e.routable(now))},
        "in_flight": sum(r.in_flight for r in e.replicas),
        "activating": e.name in router.ondemand.activating,
        "endpoints": served(r.record.engine for r in e.replicas),
    }
    if used:
        out["last_used"] = _iso(max(used))
    if e.route is not None:  # a weighted route: its split in force and what its guard found (routes.py)
        out["route"] = e.route.report(route_trips)
    return out


def _zero() -> dict[str, int]:
    return {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


async def usage_json(router: Router, day: str | None) -> dict[str, Any]:
    await router.flush_usage()  # what this router (each of its workers) counted is in the store before reading
    day = day or router.clock.day(time.time())
    rows = await asyncio.to_thread(router.store.usage, day)
    keys: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, int]] = defaultdict(_zero)
    cache = router.keys
    for row in rows:
        k = keys.get(row.key_id)
        if k is None:
            k = keys[row.key_id] = {"id": row.key_id, "name": cache.key_names.get(row.key_id),
                                    "group": cache.key_groups.get(row.key_id), **_zero(), "models": {}}
        add = {"requests": row.requests, "prompt_tokens": row.prompt_tokens,
               "completion_tokens": row.completion_tokens, "total_tokens": row.total_tokens}
        k["models"][row.model] = add
        for f, n in add.items():
            k[f] += n
            for g in cache.ancestry(k["group"]):
                groups[g][f] += n
    group_list = [{"name": g.name, "parent": g.parent, "rpm": g.rpm, "tokens_per_day": g.tokens_per_day,
                   **groups.get(g.name, _zero())} for g in sorted(cache.groups.values(), key=lambda g: g.name)]
    return {"day": day, "keys": sorted(keys.values(), key=lambda k: (k["name"] or "", k["id"])),
            "groups": group_list}


def _metrics_route(app: FastAPI, router: Router, site_dir: Path | None) -> None:
    fleet = FleetGauges(site_dir, lambda: router.table)  # the fleet, as apply's site copy summarised it

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        # every worker's, merged; then the fleet's, the same for all of them
        return Response(await router.render_metrics() + fleet.render(), media_type=CONTENT_TYPE)

    @app.get("/metrics/engines", include_in_schema=False)
    async def engine_metrics() -> Response:
        # The engines' own /metrics, relabelled per replica (their keys stay on this host).
        return Response(await relay_engine_metrics(router.session, router.table, router.engine_keys),
                        media_type=CONTENT_TYPE)


def admin_app(router: Router, site_dir: Path | None = None, dashboard: DashboardChild | None = None) -> FastAPI:
    """`site_dir`: the site copy the fleet gauges read; `dashboard`: the process every path
    this app does not answer is relayed to (None: no dashboard, those paths are 404)."""
    # No Swagger or OpenAPI schema: a map of the admin API for whoever reaches it, and a
    # page that runs scripts on the listener's origin.
    app = FastAPI(title="llmgw router admin", docs_url=None, redoc_url=None, openapi_url=None)
    # Host checked on every request, and changes same-origin, JSON and with the admin token.
    app.add_middleware(AdminGuard, token_file=router.state_path.with_name(ADMIN_TOKEN_FILE))
    openai_errors(app)
    _metrics_route(app, router, site_dir)

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/status")
    async def status() -> dict[str, Any]:
        t = router.table
        return {"serial": router.serial, "lineage": t.lineage, "state_file": str(router.state_path),
                "state_error": router.watcher.error, "engine_keys_error": router.engine_keys.error,
                "store": router.store.redacted_url,
                "store_error": router.usage_sync.last_error, "keys": len(router.keys.by_hash),
                "started_at": router.started_at.isoformat(timespec="seconds"),
                "on_demand": router.ondemand.activator is not None,
                "workers": router.peers.status() if router.peers is not None else {"count": 1}}

    @app.get("/api/v1/replicas")
    async def replicas() -> dict[str, Any]:
        t, now = router.table, time.time()
        # router.serial: with several workers, the lowest any of them routes by
        return {"serial": router.serial, "replicas": [replica_json(r, now) for r in t.replicas.values()],
                "notes": await _route_notes(router)}  # `llmgw status` shows them

    @app.get("/api/v1/replicas/{replica_id}")
    async def replica(replica_id: str) -> JSONResponse:
        r = router.table.replicas.get(replica_id)
        if r is None:
            return JSONResponse(error_payload(404, f"no replica {replica_id!r} in state serial "
                                                   f"{router.table.serial}"), 404)
        return JSONResponse(replica_json(r, time.time()))

    @app.get("/api/v1/models")
    async def models() -> dict[str, Any]:
        t, trips = router.table, await router.route_trips()
        return {"serial": router.serial,
                "models": [model_json(router, e, trips.get(e.name)) for e in sorted(t.models.values(),
                                                                               key=lambda e: e.name)]}

    @app.get("/api/v1/usage")
    async def usage(day: str | None = None) -> dict[str, Any]:
        if day is not None and not _is_day(day):
            raise StarletteHTTPException(400, "day must be YYYY-MM-DD")
        return await usage_json(router, day)

    if dashboard is not None:  # last: the admin API's own paths answer first
        app.add_route("/{path:path}", dashboard.forward, methods=["GET", "HEAD", "POST"], include_in_schema=False)
    return app


def _is_day(day: str) -> bool:
    try:
        datetime.strptime(day, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def metrics_app(router: Router, site_dir: Path | None = None) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    openai_errors(app)
    _metrics_route(app, router, site_dir)
    return app
