"""The controller's admin API: its leadership, the runs (commit, plan summary, result, log),
and approval of a waiting run. Served on loopback by default, like the router's admin
listener; whoever may approve must show an operator token (llmgw.controller.operators).

    GET  /api/v1/controller          leader?, the lease holder, the last commit, the last error
    GET  /api/v1/runs                every run, newest first (without plans)
    GET  /api/v1/runs/{id}           one run, with its plan
    POST /api/v1/runs/{id}/approve   approve a waiting run (operator token); the next tick applies it
    GET  /api/v1/demand              per model: current/desired replicas, load, the last scale
                                     decision and its reason; activations in flight; routers
    GET  /metrics                    Prometheus: activations and scale decisions by outcome
                                     (llmgw.controller.metrics; loopback, as the rest here)

Every request must name this listener in `Host` (a DNS-rebound name reaching 127.0.0.1 is
refused, 421). A write (any POST) must also come from no other web origin (`Origin`,
`Sec-Fetch-Site`: a page elsewhere cannot post here, 403), carry `Content-Type:
application/json` (a form or `text/plain` post, which browsers send cross-site without
asking, 415) and `Authorization: Bearer` an operator token (401): the run records the
operator the token names as `approved_by`. Reads stay open to whoever reaches the listener
(what `llmgw status` shows anyone with the state). Run ids are small and sequential: a
guessed id is worthless without a token.

The routers' demand API (`demand_app`) is another listener, reachable by the routers: each
router shows its own token (llmgw.apply.controller_token), which names it; it can report
its load and ask for a model to be started, nothing else:

    POST /api/v1/demand/report       this router process's load (llmgw.controller.demand),
                                     counted under the router its token names (a body naming
                                     another router: 403)
    POST /api/v1/demand/activate     {"model"}: start a replica if none runs; the answer
                                     says pending|starting|ready|failed, why, and how long
                                     the router may hold requests (hold_s)
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from llmgw.apply.controller_token import router_of
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.controller.demand import ForgedReport, ReportError, parse_report
from llmgw.controller.loop import Controller
from llmgw.controller.metrics import CONTENT_TYPE
from llmgw.controller.operators import Operators
from llmgw.errors import LlmgwError

MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_ADMIN_BODY = 64 * 1024
_READS = frozenset({"GET", "HEAD"})
# What a browser says of a request a person made here (typed, or from this origin's own page).
_SAME_SITE = frozenset({"same-origin", "none"})


def listener_names(host: str) -> frozenset[str]:
    """The host names (lower case) a listener on `host` answers to in `Host`: its address, and
    for loopback or any-address listeners the names this machine gives itself. Ports are not
    compared: a rebound name is refused whatever its port, and an SSH tunnel's local port
    (`ssh -L 9000:127.0.0.1:8095`) still reaches the API as 127.0.0.1."""
    bare = host.strip("[]").lower()
    names = {bare}
    try:
        addr = ipaddress.ip_address(bare)
    except ValueError:
        addr = None
    if bare == "localhost" or (addr is not None and (addr.is_loopback or addr.is_unspecified)):
        names |= {"localhost", "127.0.0.1", "::1"}
    if addr is not None and addr.is_unspecified:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def _host_name(header: str) -> str:
    """`name`, `name:port`, `[v6]` or `[v6]:port` -> the name (lower case)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if ":" in header else header


def _refuse(status: int, message: str, **headers: str) -> Response:
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


def _guard(hosts: frozenset[str], operators: Operators) -> Callable[[Request, Callable[[Request], Awaitable[Response]]],
                                                                    Awaitable[Response]]:
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        host = request.headers.get("host", "").strip().lower()
        if _host_name(host) not in hosts:
            return _refuse(421, f"this is the controller's admin API at {', '.join(sorted(hosts))}, not "
                                f"{host[:100]!r}: use one of those names (a name that resolves here is not enough)")
        if request.method in _READS:
            return await call_next(request)
        # Same origin: the page that posts was served by this listener, under this very Host.
        origin = request.headers.get("origin")
        site = request.headers.get("sec-fetch-site")
        if (origin is not None and origin.lower() not in (f"http://{host}", f"https://{host}")) \
                or (site is not None and site not in _SAME_SITE):
            return _refuse(403, "cross-origin writes are refused: approve with `llmgw approve RUN`, or from this "
                                "listener's own origin")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return _refuse(415, f"a write's body must be application/json, not {media[:60]!r}")
        given = request.headers.get("authorization", "")
        who = operators.identify(given.removeprefix("Bearer ").strip()) if given.startswith("Bearer ") else None
        if who is None:
            return _refuse(401, "an operator token is required (Authorization: Bearer <the controller's "
                                "operator.token>); `llmgw approve RUN` sends it", **{"WWW-Authenticate": "Bearer"})
        request.state.operator = who
        return await call_next(request)

    return guard


async def _json_object(request: Request, limit: int) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > limit:
        raise HTTPException(413, f"at most {limit} bytes")
    try:
        data = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return data


def controller_app(controller: Controller, *, operators: Operators, hosts: Iterable[str]) -> FastAPI:
    """The admin API; `hosts`: the host names its listener answers to (`listener_names`)."""
    app = FastAPI(title="llmgw controller", docs_url=None, redoc_url=None, openapi_url=None)
    app.middleware("http")(_guard(frozenset(h.lower() for h in hosts), operators))

    @app.get("/api/v1/controller")
    def status() -> dict[str, Any]:
        s = controller.status
        return {"name": controller.name, "leader": s.leader, "holder": s.holder, "last_commit": s.last_commit,
                "error": s.error, "branch": controller.branch, "policy": controller.policy}

    @app.get("/api/v1/runs")
    def runs() -> dict[str, Any]:
        return {"runs": [r.as_json() for r in controller.runs.all()]}

    @app.get("/api/v1/runs/{run_id}")
    def run(run_id: int) -> dict[str, Any]:
        try:
            return controller.runs.get(run_id).as_json(with_plan=True)
        except LlmgwError as exc:
            raise HTTPException(404, exc.message) from None

    @app.get("/api/v1/demand")
    def demand() -> dict[str, Any]:
        return controller.scaler.view()

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(controller.scaler.metrics.render(), media_type=CONTENT_TYPE)

    @app.post("/api/v1/runs/{run_id}/approve")
    async def approve(run_id: int, request: Request) -> dict[str, Any]:
        await _json_object(request, MAX_ADMIN_BODY)
        try:
            approved = await asyncio.to_thread(controller.approve, run_id, request.state.operator)
        except LlmgwError as exc:
            raise HTTPException(409, exc.message) from None
        return approved.as_json()

    return app


def demand_app(controller: Controller, keyring: EngineKeyring) -> FastAPI:
    """The routers' listener: load reports and activation requests, each router by its own token."""
    app = FastAPI(title="llmgw controller demand API", docs_url=None, redoc_url=None, openapi_url=None)

    def router(request: Request) -> str:
        given = request.headers.get("authorization", "")
        name = router_of(keyring, given.removeprefix("Bearer ").strip()) if given.startswith("Bearer ") else None
        if name is None:
            raise HTTPException(401, "a router's own token is required (Authorization: Bearer ...; apply "
                                     "delivers it as controller.token)")
        known = controller.scaler.routers
        if known and name not in known:
            raise HTTPException(403, f"router {name!r} is not in the inventory")
        return name

    @app.post("/api/v1/demand/report")
    async def report(request: Request) -> dict[str, Any]:
        name = router(request)
        raw = await request.body()
        if len(raw) > MAX_REPORT_BYTES:
            raise HTTPException(413, f"at most {MAX_REPORT_BYTES} bytes")
        try:
            controller.scaler.reports.add(parse_report(json.loads(raw), time.monotonic(), name), len(raw))
        except ValueError:
            raise HTTPException(400, "the body is not JSON") from None
        except ForgedReport as exc:
            raise HTTPException(403, exc.message) from None
        except ReportError as exc:
            raise HTTPException(400, exc.message) from None
        return {"ok": True}

    @app.post("/api/v1/demand/activate")
    async def activate(request: Request) -> dict[str, Any]:
        router(request)
        data = await _json_object(request, MAX_REPORT_BYTES)
        model = data.get("model")
        if not isinstance(model, str) or not 0 < len(model) <= 200:
            raise HTTPException(400, "give the model: {\"model\": NAME}")

        def ready(name: str) -> bool:
            return any(r.model == name and r.state == "ready" for r in controller.backend.read().replicas)

        return (await asyncio.to_thread(controller.scaler.ask, model, ready)).as_json()

    return app
