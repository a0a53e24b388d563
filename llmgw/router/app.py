"""The router: one `Router` holding the routing table, keys, usage and health, and the
client listener's ASGI app.

    client   (ClientApp)  auth in front; the endpoints of endpoints.py (chat, completions,
                          embeddings, responses, rerank, score, audio, tokenize) on the
                          raw ASGI hot path (proxy.py); /, /health, /v1/models through
                          FastAPI; any other /v1/ path a 404 naming it and the model

The admin and metrics listeners are in admin.py, which depends on this module and on the
dashboard (llmgw.web); neither imports it back.

Everything with a lifetime (upstream HTTP session, store, activator) is handed in, so
tests and the CLI wire the same object.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llmgw.router.admission import Admission
from llmgw.router.asgi import ClientGone, Receive, Scope, Send
from llmgw.router.auth import AUTH_EXEMPT_PATHS, KeyCache
from llmgw.router.batch_dispatch import via_proxy
from llmgw.router.batches import PREFIXES as BATCH_PREFIXES
from llmgw.router.batches import BatchService
from llmgw.router.bodies import read_body
from llmgw.router.calls import Call
from llmgw.router.endpoints import match, methods_for, served
from llmgw.router.engine_keys import ENGINE_KEYS_FILE, EngineKeys
from llmgw.router.health import HealthChecker
from llmgw.router.landing import landing_page
from llmgw.router.metrics import RouterMetrics
from llmgw.router.ondemand import Activator, OnDemand
from llmgw.router.openai_errors import RouterError, error_payload, send_error
from llmgw.router.principal import Principal
from llmgw.router.proxy import Proxy
from llmgw.router.quotas import Quotas
from llmgw.router.responses import ResponseAffinity
from llmgw.router.settings import RouterSettings
from llmgw.router.shared import SharedRuntime, SharedTable
from llmgw.router.slots import SlotCounts
from llmgw.router.statewatch import StateWatcher
from llmgw.router.table import ModelEntry, ReplicaRuntime, RoutingTable
from llmgw.router.usage import Clock, UsageRecorder, UsageSync
from llmgw.state import Replica, State
from llmgw.store import Store

log = logging.getLogger("llmgw.router")


class Peers(Protocol):
    """The other processes of a router with several workers, as its admin side sees them
    (workers.py): what only they know, gathered when the admin API is asked."""

    async def render_metrics(self, own: RouterMetrics) -> bytes:
        """/metrics for the router as a whole: `own` (this process) merged with every worker's."""

    async def merged_metrics(self, own: RouterMetrics) -> RouterMetrics:
        """The counts behind render_metrics: `own` and every worker's, merged."""

    async def flush_usage(self) -> None:
        """Every worker's counted usage written to the store."""

    def status(self) -> dict[str, Any]:
        """The workers: how many, their pids, which are ready, restarts."""


class Router:
    """Everything one router process knows and does, apart from listening.

    With several workers (workers.py) every worker runs one, with `shared` (its row of
    the shared counters) and `reports_load` off; the supervisor runs one for the admin API
    with `shared` as a reader and `peers` set, so in-flight counts, drains and /metrics
    answer for every worker."""

    def __init__(self, *, state_path: Path, store: Store, session: aiohttp.ClientSession,
                 settings: RouterSettings | None = None, activator: Activator | None = None,
                 shared: SharedTable | None = None, reports_load: bool = True) -> None:
        self.settings = settings = settings or RouterSettings()
        self.state_path = state_path
        self.store = store
        self.session = session
        self.shared = shared
        self.reports_load = reports_load
        self.peers: Peers | None = None
        self.table = RoutingTable.empty(self._runtime if shared is not None else None)
        self.started_at = datetime.now(UTC)
        self._changed = asyncio.Event()
        self.metrics = RouterMetrics(lambda: self.table)
        self.keys = KeyCache(store, refresh_interval=settings.key_refresh_interval,
                             miss_refresh_interval=settings.key_miss_refresh_interval)
        self.clock = Clock()
        self.recorder = UsageRecorder()
        self.usage_sync = UsageSync(store, self.keys, self.recorder, self.clock, settings.usage_flush_interval)
        self.engine_keys = EngineKeys(state_path.with_name(ENGINE_KEYS_FILE))  # what each engine wants to see
        self.watcher = StateWatcher(state_path, self.apply_state, settings.state_poll_interval, self.engine_keys)
        self.ondemand = OnDemand(activator, settings, lambda: self.table, lambda: self._changed,
                                 self.watcher.poke)
        self.health = HealthChecker(session, lambda: self.table, settings, self.notify)
        self.quotas = Quotas(store, self.recorder, self.clock, settings)
        # Each worker admits up to its part of a model's slots (admission.py).
        self.slots = SlotCounts(settings, lambda: self.table, self.engine_keys)
        self.admission = Admission(settings, lambda: self.table, metrics=self.metrics, slots=self.slots,
                                   workers=shared.rows if shared is not None and shared.row is not None else 1,
                                   index=shared.row if shared is not None and shared.row is not None else 0)
        self.ondemand.queued = self.admission.queued  # a queue is load: demand scaling sees it
        self.proxy = Proxy(settings=settings, session=session, table=lambda: self.table, metrics=self.metrics,
                           recorder=self.recorder, clock=self.clock, ondemand=self.ondemand, quotas=self.quotas,
                           engine_keys=self.engine_keys, admission=self.admission)
        self.responses = ResponseAffinity()  # which replica produced each Responses API id
        self.batches = BatchService(store=store, settings=settings, state_path=state_path, table=lambda: self.table,
                                    dispatch=via_proxy(self.proxy, self.responses), principal_of=self._active_key)
        self.ondemand.queue_wait = self.admission.queue_wait  # so are a long wait and a batch backlog
        self.ondemand.backlog = self.batches.runner.backlog.by_model
        self._tasks: list[asyncio.Task[None]] = []

    def _active_key(self, key_id: str) -> Principal | None:
        """The active key with this id, as authentication would make it (None once revoked)."""
        return next((p for p in self.keys.by_hash.values() if p.key_id == key_id), None)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        self.watcher.load_now()
        await self.keys.refresh()
        await self.usage_sync.sync()
        for name, coro in (("state", self.watcher.run()), ("health", self.health.run()),
                           ("keys", self.keys.run()), ("usage", self.usage_sync.run()),
                           ("idle", self.ondemand.run_reports()), ("watchdog", self.proxy.watchdog()),
                           ("slots", self.slots.run())):
            if name == "idle" and not self.reports_load:
                coro.close()  # the supervisor reports load to the controller once for every worker
                continue
            self._tasks.append(asyncio.create_task(coro, name=f"llmgw-router-{name}"))
        if self.shared is None or self.shared.row is not None:  # batches run where requests are served
            self._tasks.append(asyncio.create_task(self.batches.runner.run(), name="llmgw-router-batches"))

    async def stop(self) -> None:
        await self.batches.runner.drain(self.settings.batch_lease_ttl)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.ondemand.close()
        with contextlib.suppress(Exception):
            await self.usage_sync.sync()  # the last counts of this process

    async def flush_usage(self) -> None:
        """What this router counted (every worker's, with several) is in the store."""
        await self.usage_sync.sync()
        if self.peers is not None:
            await self.peers.flush_usage()

    async def render_metrics(self) -> bytes:
        if self.peers is not None:
            return await self.peers.render_metrics(self.metrics)
        return self.metrics.render()

    async def route_trips(self) -> dict[str, set[str]]:
        """Per weighted route, the canaries its guard tripped in this process or any worker (routes.py)."""
        routes = [e for e in self.table.models.values() if e.route is not None]
        if not routes:  # the usual case: no worker is asked (apply polls /api/v1/replicas while it drains)
            return {}
        metrics = self.metrics if self.peers is None else await self.peers.merged_metrics(self.metrics)
        return {e.name: metrics.tripped_targets(e.route) for e in routes if e.route is not None}

    # -- state ---------------------------------------------------------------------------
    def _runtime(self, record: Replica, live: Collection[str]) -> ReplicaRuntime:
        assert self.shared is not None
        return SharedRuntime(record, self.shared, live)

    def apply_state(self, state: State) -> None:
        old = self.table
        self.table = RoutingTable(state, old.replicas, self._runtime if self.shared is not None else None,
                                  routes=old.routes)  # weighted routes keep their guard findings (routes.py)
        if self.shared is not None:
            self.shared.routing_by(state.serial)
        if old.serial != state.serial or old.lineage != state.lineage:
            log.info("routing by state serial %d (%d models, %d replicas)", state.serial,
                     len(state.models), len(state.replicas))
        self.notify()

    @property
    def serial(self) -> int:
        """The state serial this router routes by: with several workers, the lowest any
        worker routes by (the supervisor's admin API says what the router as a whole holds)."""
        if self.shared is not None and self.shared.row is None:
            return min(self.table.serial, self.shared.held_serial())
        return self.table.serial

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
        if path.startswith(BATCH_PREFIXES):
            await router.batches.handle(scope, receive, send, principal)
            return
        found = match(scope["method"], path)
        if found is not None:
            await router.proxy.handle(scope, receive, send, principal, Call(scope, receive, found, router.responses))
            return
        allowed = methods_for(path)
        if allowed:
            await send_error(send, RouterError(405, f"{path} takes {' or '.join(allowed)}",
                                               headers={"Allow": ", ".join(allowed)}))
            return
        if path.startswith("/v1/") and path != "/v1/models" and not path.startswith("/v1/models/"):
            await self.unknown_endpoint(scope, receive, send)
            return
        await self.inner(scope, receive, send)

    async def unknown_endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A 404 that names the endpoint and, when the body names one, the model."""
        router = self.router
        router.metrics.reject("unknown_endpoint")
        endpoint = f"{scope['method']} {scope['path']}"
        try:
            body = await read_body(scope, receive, router.settings.max_body_bytes)
        except ClientGone:
            return
        except RouterError as err:
            await send_error(send, err)
            return
        model = _model_named(body)
        entry = router.table.resolve(model) if model else None
        if entry is not None:
            message = (f"model `{model}` does not serve `{endpoint}` through this router; it serves: "
                       + ", ".join(served(r.record.engine for r in entry.replicas)))
        elif model:
            message = f"this router serves no endpoint `{endpoint}` (for model `{model}`, or any other)"
        else:
            message = f"this router serves no endpoint `{endpoint}`; GET /v1/models lists what each model serves"
        await send_error(send, RouterError(404, message, code="unknown_endpoint"))


def _model_named(body: bytes) -> str | None:
    try:
        req = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None
    model = req.get("model") if isinstance(req, dict) else None
    return model if isinstance(model, str) and model else None


def openai_errors(app: FastAPI) -> None:
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


def _model_object(entry: ModelEntry, table: RoutingTable) -> dict[str, Any]:
    # A weighted route serves what its targets' replicas serve (routes.py); it has none of its own.
    replicas = entry.replicas if entry.route is None else [r for e in table.chain(entry) for r in e.replicas]
    created = [r.record.created_at for r in replicas if r.record.created_at is not None]
    out: dict[str, Any] = {"id": entry.name, "object": "model",
                           "created": int(min(created).timestamp()) if created else 0, "owned_by": "llmgw",
                           "endpoints": served(r.record.engine for r in replicas)}
    if entry.base is not None:  # a LoRA adapter names its base model, as vLLM lists adapters
        out["parent"] = entry.base
    return out


def client_app(router: Router) -> ClientApp:
    app = FastAPI(title="llmgw", docs_url=None, redoc_url=None, openapi_url=None)
    openai_errors(app)

    @app.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False)
    async def landing(request: Request) -> HTMLResponse:
        return HTMLResponse(landing_page(request.scope))

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        now = time.monotonic()
        every = [*router.table.models.values(), *router.table.adapters.values()]
        data = [_model_object(e, router.table) for e in sorted(every, key=lambda e: e.name)
                if router.answerable(e, now)]
        return {"object": "list", "data": data}

    @app.get("/v1/models/{name:path}")
    async def model(name: str) -> JSONResponse:
        entry = router.table.resolve(name)
        if entry is None or not router.answerable(entry, time.monotonic()):
            return JSONResponse(error_payload(404, f"The model `{name}` does not exist or you do not "
                                                   "have access to it.", code="model_not_found"), 404)
        return JSONResponse(_model_object(entry, router.table))

    return ClientApp(router, app)
