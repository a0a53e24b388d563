"""The router: one `Router` holding the routing table, keys, usage and health, and the
three ASGI apps that are its listeners.

    client   (ClientApp)  auth in front; /v1/chat/completions, /v1/completions and
                          /v1/embeddings on the raw ASGI hot path (proxy.py); /, /health,
                          /v1/models through FastAPI
    admin    (FastAPI)    /api/v1/replicas, /api/v1/models, /api/v1/usage, /api/v1/status,
                          /metrics, /health — loopback by default
    metrics  (FastAPI)    /metrics alone, safe to expose

Everything with a lifetime (upstream HTTP session, store, activator) is handed in, so
tests and the CLI wire the same object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from llmgw.router.auth import AUTH_EXEMPT_PATHS, KeyCache
from llmgw.router.errors import Receive, RouterError, Scope, Send, error_payload, send_error
from llmgw.router.health import HealthChecker
from llmgw.router.landing import landing_page
from llmgw.router.metrics import CONTENT_TYPE, RouterMetrics
from llmgw.router.ondemand import Activator, OnDemand
from llmgw.router.proxy import PROXY_PATHS, Proxy
from llmgw.router.settings import RouterSettings
from llmgw.router.statewatch import StateWatcher
from llmgw.router.table import ModelEntry, ReplicaRuntime, RoutingTable
from llmgw.router.usage import Clock, UsageRecorder, UsageSync
from llmgw.state import State
from llmgw.store import Store

log = logging.getLogger("llmgw.router")


class Router:
    """Everything one router process knows and does, apart from listening."""

    def __init__(self, *, state_path: Path, store: Store, session: aiohttp.ClientSession,
                 settings: RouterSettings | None = None, activator: Activator | None = None) -> None:
        self.settings = settings = settings or RouterSettings()
        self.state_path = state_path
        self.store = store
        self.session = session
        self.table = RoutingTable.empty()
        self.started_at = datetime.now(UTC)
        self._changed = asyncio.Event()
        self.metrics = RouterMetrics(lambda: self.table)
        self.keys = KeyCache(store, refresh_interval=settings.key_refresh_interval,
                             miss_refresh_interval=settings.key_miss_refresh_interval)
        self.clock = Clock()
        self.recorder = UsageRecorder()
        self.usage_sync = UsageSync(store, self.keys, self.recorder, self.clock, settings.usage_flush_interval)
        self.watcher = StateWatcher(state_path, self.apply_state, settings.state_poll_interval)
        self.ondemand = OnDemand(activator, settings, lambda: self.table, lambda: self._changed,
                                 self.watcher.poke)
        self.health = HealthChecker(session, lambda: self.table, settings, self.notify)
        self.proxy = Proxy(settings=settings, session=session, table=lambda: self.table, metrics=self.metrics,
                           recorder=self.recorder, clock=self.clock, ondemand=self.ondemand)
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        self.watcher.load_now()
        await self.keys.refresh()
        await self.usage_sync.sync()
        for name, coro in (("state", self.watcher.run()), ("health", self.health.run()),
                           ("keys", self.keys.run()), ("usage", self.usage_sync.run()),
                           ("idle", self.ondemand.run_idle()), ("watchdog", self.proxy.watchdog())):
            self._tasks.append(asyncio.create_task(coro, name=f"llmgw-router-{name}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.ondemand.close()
        with contextlib.suppress(Exception):
            await self.usage_sync.sync()  # the last counts of this process

    # -- state ---------------------------------------------------------------------------
    def apply_state(self, state: State) -> None:
        old = self.table
        self.table = RoutingTable(state, old.replicas)
        if old.serial != state.serial or old.lineage != state.lineage:
            log.info("routing by state serial %d (%d models, %d replicas)", state.serial,
                     len(state.models), len(state.replicas))
        self.notify()

    def notify(self) -> None:
        """Wake whoever waits for the table or a replica's health to change."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def answerable(self, entry: ModelEntry, now: float) -> bool:
        """Would a request for this model be served now (its replicas, fallbacks or a start)?"""
        for e in self.table.chain(entry):
            if e.routable(now) or (e.on_demand and self.ondemand.activator is not None):
                return True
        return False


# -- client listener ------------------------------------------------------------------------
class ClientApp:
    """Auth in front of everything but the exempt paths; the proxy paths skip the framework."""

    def __init__(self, router: Router, inner: FastAPI) -> None:
        self.router = router
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path = scope["path"]
        if path in AUTH_EXEMPT_PATHS:
            await self.inner(scope, receive, send)
            return
        router = self.router
        try:
            principal = await router.keys.authenticate(scope["headers"])
        except RouterError as err:
            router.metrics.reject("auth")
            await send_error(send, err)
            return
        usage_capable = PROXY_PATHS.get(path)
        if usage_capable is None:
            await self.inner(scope, receive, send)
            return
        if scope["method"] != "POST":
            await send_error(send, RouterError(405, f"{path} takes POST", headers={"Allow": "POST"}))
            return
        await router.proxy.handle(scope, receive, send, principal, path, usage_capable)


def _openai_errors(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such path: {request.url.path}"
        return JSONResponse(error_payload(exc.status_code, message), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid request"}
        return JSONResponse(error_payload(400, str(first.get("msg"))), status_code=400)


def _model_object(entry: ModelEntry) -> dict[str, Any]:
    created = [r.record.created_at for r in entry.replicas if r.record.created_at is not None]
    return {"id": entry.name, "object": "model",
            "created": int(min(created).timestamp()) if created else 0, "owned_by": "llmgw"}


def client_app(router: Router) -> ClientApp:
    app = FastAPI(title="llmgw", docs_url=None, redoc_url=None, openapi_url=None)
    _openai_errors(app)

    @app.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False)
    async def landing(request: Request) -> HTMLResponse:
        return HTMLResponse(landing_page(request.scope))

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        now = time.monotonic()
        data = [_model_object(e) for e in sorted(router.table.models.values(), key=lambda e: e.name)
                if router.answerable(e, now)]
        return {"object": "list", "data": data}

    @app.get("/v1/models/{name:path}")
    async def model(name: str) -> JSONResponse:
        entry = router.table.resolve(name)
        if entry is None or not router.answerable(entry, time.monotonic()):
            return JSONResponse(error_payload(404, f"The model `{name}` does not exist or you do not "
                                                   "have access to it.", code="model_not_found"), 404)
        return JSONResponse(_model_object(entry))

    return ClientApp(router, app)


# -- admin listener -------------------------------------------------------------------------
def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def replica_json(r: ReplicaRuntime, now: float) -> dict[str, Any]:
    """One replica for apply and the dashboard; `last_used` is absent when never used."""
    out: dict[str, Any] = {
        "id": r.id, "model": r.model, "profile": r.record.profile, "engine": r.record.engine,
        "state": r.state, "endpoint": r.endpoint, "health": r.health,
        "routable": r.routable(time.monotonic()), "in_flight": r.in_flight, "requests": r.requests,
        "consecutive_failures": r.failures,
    }
    if r.last_used is not None:
        out["last_used"] = _iso(r.last_used)
        out["idle_seconds"] = round(max(0.0, now - r.last_used), 3)
    if r.last_error is not None:
        out["last_error"] = r.last_error
    return out


def model_json(router: Router, e: ModelEntry) -> dict[str, Any]:
    now = time.monotonic()
    counts = {"starting": 0, "ready": 0, "draining": 0}
    for r in e.replicas:
        counts[r.state] += 1
    used = [r.last_used for r in e.replicas if r.last_used is not None]
    out: dict[str, Any] = {
        "name": e.name, "aliases": list(e.record.aliases), "fallbacks": list(e.record.fallbacks),
        "scaling": e.record.scaling.model_dump(), "on_demand": e.on_demand,
        "available": router.answerable(e, now),
        "replicas": {**counts, "routable": len(e.routable(now))},
        "in_flight": sum(r.in_flight for r in e.replicas),
        "activating": e.name in router.ondemand.activating,
    }
    if used:
        out["last_used"] = _iso(max(used))
    return out


def _zero() -> dict[str, int]:
    return {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


async def usage_json(router: Router, day: str | None) -> dict[str, Any]:
    await router.usage_sync.sync()  # what this router counted is in the store before reading
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


def _metrics_route(app: FastAPI, router: Router) -> None:
    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(router.metrics.render(), media_type=CONTENT_TYPE)


def admin_app(router: Router, site_dir: Path | None = None) -> FastAPI:
    app = FastAPI(title="llmgw router admin", docs_url="/api/docs", redoc_url=None,
                  openapi_url="/api/openapi.json")
    if site_dir is not None:  # the read-only dashboard needs a site: catalog, inventory, facts
        from llmgw.web import mount_dashboard

        mount_dashboard(app, router, site_dir)
    _openai_errors(app)
    _metrics_route(app, router)

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/status")
    async def status() -> dict[str, Any]:
        t = router.table
        return {"serial": t.serial, "lineage": t.lineage, "state_file": str(router.state_path),
                "state_error": router.watcher.error, "store": router.store.redacted_url,
                "store_error": router.usage_sync.last_error, "keys": len(router.keys.by_hash),
                "started_at": router.started_at.isoformat(timespec="seconds"),
                "on_demand": router.ondemand.activator is not None}

    @app.get("/api/v1/replicas")
    async def replicas() -> dict[str, Any]:
        t, now = router.table, time.time()
        return {"serial": t.serial, "replicas": [replica_json(r, now) for r in t.replicas.values()]}

    @app.get("/api/v1/replicas/{replica_id}")
    async def replica(replica_id: str) -> JSONResponse:
        r = router.table.replicas.get(replica_id)
        if r is None:
            return JSONResponse(error_payload(404, f"no replica {replica_id!r} in state serial "
                                                   f"{router.table.serial}"), 404)
        return JSONResponse(replica_json(r, time.time()))

    @app.get("/api/v1/models")
    async def models() -> dict[str, Any]:
        t = router.table
        return {"serial": t.serial,
                "models": [model_json(router, e) for e in sorted(t.models.values(), key=lambda e: e.name)]}

    @app.get("/api/v1/usage")
    async def usage(day: str | None = None) -> dict[str, Any]:
        if day is not None and not _is_day(day):
            raise StarletteHTTPException(400, "day must be YYYY-MM-DD")
        return await usage_json(router, day)

    return app


def _is_day(day: str) -> bool:
    try:
        datetime.strptime(day, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def metrics_app(router: Router) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    _openai_errors(app)
    _metrics_route(app, router)
    return app

