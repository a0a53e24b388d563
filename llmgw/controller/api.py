"""The controller's admin API: its leadership, the runs (commit, plan summary, result, log),
and approval of a waiting run. Served on loopback by default, like the router's admin
listener: whoever reaches it can approve a destructive plan.

    GET  /api/v1/controller          leader?, the lease holder, the last commit, the last error
    GET  /api/v1/runs                every run, newest first (without plans)
    GET  /api/v1/runs/{id}           one run, with its plan
    POST /api/v1/runs/{id}/approve   approve a waiting run; the next tick applies it
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException

from llmgw.controller.loop import Controller
from llmgw.errors import LlmgwError


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

    @app.post("/api/v1/runs/{run_id}/approve")
    def approve(run_id: int) -> dict[str, Any]:
        try:
            return controller.approve(run_id, "admin API").as_json()
        except LlmgwError as exc:
            raise HTTPException(409, exc.message) from None

    return app
