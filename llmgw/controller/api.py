"""The controller's admin API: its leadership, the runs (commit, plan summary, result, log),
and approval of a waiting run. Served on loopback by default, like the router's admin
listener: whoever reaches it can approve a destructive plan.

    GET  /api/v1/controller          leader?, the lease holder, the last commit, the last error
    GET  /api/v1/runs                every run, newest first (without plans)
    GET  /api/v1/runs/{id}           one run, with its plan
    POST /api/v1/runs/{id}/approve   approve a waiting run; the next tick applies it
    GET  /api/v1/demand              per model: current/desired replicas, load, the last scale
                                     decision and its reason; activations in flight; routers
    GET  /metrics                    Prometheus: activations and scale decisions by outcome
                                     (llmgw.controller.metrics; loopback, as the rest here)

The routers' demand API (`demand_app`) is another listener, reachable by the routers and
answering only a bearer token (llmgw.apply.controller_token); it can report load and ask
for a model to be started, nothing else:

    POST /api/v1/demand/report       a router process's load (llmgw.controller.demand)
    POST /api/v1/demand/activate     {"model"}: start a replica if none runs; the answer
                                     says pending|starting|ready|failed, why, and how long
                                     the router may hold requests (hold_s)
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response

from llmgw.controller.demand import ReportError, parse_report
from llmgw.controller.loop import Controller
from llmgw.controller.metrics import CONTENT_TYPE
from llmgw.errors import LlmgwError

MAX_REPORT_BYTES = 4 * 1024 * 1024


def controller_app(controller: Controller) -> FastAPI:
    app = FastAPI(title="llmgw controller", docs_url=None, redoc_url=None, openapi_url=None)

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
    def approve(run_id: int) -> dict[str, Any]:
        try:
            return controller.approve(run_id, "admin API").as_json()
        except LlmgwError as exc:
            raise HTTPException(409, exc.message) from None

    return app


def demand_app(controller: Controller, token: Callable[[], str]) -> FastAPI:
    """The routers' listener: load reports and activation requests, behind `token()`."""
    app = FastAPI(title="llmgw controller demand API", docs_url=None, redoc_url=None, openapi_url=None)

    async def body(request: Request) -> Any:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token()}".encode()):
            raise HTTPException(401, "a router's token is required (Authorization: Bearer ...)")
        raw = await request.body()
        if len(raw) > MAX_REPORT_BYTES:
            raise HTTPException(413, f"at most {MAX_REPORT_BYTES} bytes")
        try:
            return json.loads(raw)
        except ValueError:
            raise HTTPException(400, "the body is not JSON") from None

    @app.post("/api/v1/demand/report")
    async def report(request: Request) -> dict[str, Any]:
        data = await body(request)
        try:
            controller.scaler.reports.add(parse_report(data, time.monotonic()))
        except ReportError as exc:
            raise HTTPException(400, exc.message) from None
        return {"ok": True}

    @app.post("/api/v1/demand/activate")
    async def activate(request: Request) -> dict[str, Any]:
        data = await body(request)
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, str) or not 0 < len(model) <= 200:
            raise HTTPException(400, "give the model: {\"model\": NAME}")

        def ready(name: str) -> bool:
            return any(r.model == name and r.state == "ready" for r in controller.backend.read().replicas)

        return (await asyncio.to_thread(controller.scaler.ask, model, ready)).as_json()

    return app
