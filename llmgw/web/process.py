"""The dashboard as a process of its own: `python -m llmgw.web.process`, started by a router.

A router's admin listener hands the dashboard's requests to this process
(llmgw.router.dashboard_child) so that the router itself never loads the site, the views
or the templates: a 4,096-host site is hundreds of MB of objects and up to seconds of CPU
per page, and none of that code is reachable from the listeners clients talk to
(tests/maintenance/test_router_closure.py).

The router hands it, on stdin (never on a command line: the store URL may carry a
password), one JSON object: `parent` (its pid: this process ends with it), `fd` (a
listening Unix socket the router bound and keeps, so requests queue there while this
process starts), `site_dir`, `admin_url` (the router's admin API, on loopback), `store_url`
(bench and check results) and `log_level`.

What only the router knows (replicas' health and load, usage, routes, endpoints) this
process asks the router's admin API for, with GETs: the same JSON `llmgw status` reads
from the bastion, so the two cannot disagree.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llmgw.errors import LlmgwError
from llmgw.views import Runtime, SiteDataCache
from llmgw.views.results import model_results
from llmgw.web.dashboard import DashboardSources, dashboard_router

log = logging.getLogger("llmgw.web")
THIS_ROUTER = "this router"  # how the pages name the one router behind them
ASK_TIMEOUT = 10.0  # seconds for one admin API answer: the router answers from memory


class AdminApi:
    """The router's admin API, as this process asks it (GETs on loopback)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            resp = await self.client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise LlmgwError(f"the router's admin API did not answer {path}: {type(exc).__name__}: {exc}") from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            why = error.get("message") if isinstance(error, dict) else f"HTTP {resp.status_code}"
            raise LlmgwError(f"the router's admin API refused {path}: {why}")
        return body

    async def runtime(self) -> Runtime:
        try:
            body = await self.get("/api/v1/replicas")
        except LlmgwError as exc:
            return Runtime.unknown(exc.message)
        replicas = body.get("replicas")
        if not isinstance(replicas, list):
            return Runtime.unknown("the router's admin API answered without a replica list")
        notes = [n for n in body.get("notes") or () if isinstance(n, str)]
        return Runtime.from_replicas([(THIS_ROUTER, [r for r in replicas if isinstance(r, dict)])], notes=notes)

    async def models(self) -> dict[str, dict[str, Any]]:
        """Model name -> its admin API record (endpoints, route report); {} when not known."""
        try:
            body = await self.get("/api/v1/models")
        except LlmgwError as exc:
            log.warning("dashboard: %s", exc.message)
            return {}
        return {str(m.get("name")): m for m in body.get("models") or () if isinstance(m, dict)}

    async def usage(self, day: str | None) -> dict[str, Any]:
        return await self.get("/api/v1/usage", {"day": day} if day else None)


def sources(site_dir: Path, admin: AdminApi, store_url: str | None) -> DashboardSources:
    results: Callable[[str], dict[str, Any]] | None = None
    if store_url is not None:
        url = store_url
        results = lambda name: model_results(url, name)  # noqa: E731 - opened per page: results change rarely
    return DashboardSources(site=SiteDataCache(site_dir), runtime=admin.runtime, usage=admin.usage,
                            models=admin.models, results=results)


def app(site_dir: Path, admin: AdminApi, store_url: str | None) -> FastAPI:
    # No Swagger or OpenAPI schema here either: whoever reaches the admin listener reaches this.
    web = FastAPI(title="llmgw dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    web.include_router(dashboard_router(sources(site_dir, admin, store_url)))

    @web.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The admin API's error shape (llmgw.router.openai_errors), for paths neither serves.
        message = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such path: {request.url.path}"
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                       "code": None}}, status_code=exc.status_code)
    return web


def _die_with(parent: int) -> None:
    """SIGTERM this process when the router dies (Linux), then check it is still there."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        raise SystemExit("llmgw dashboard: the router that started it is gone")


def main() -> None:
    spec = json.loads(sys.stdin.read())
    _die_with(int(spec["parent"]))
    logging.basicConfig(level=str(spec.get("log_level") or "info").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sock = socket.socket(fileno=int(spec["fd"]))
    client = httpx.AsyncClient(base_url=str(spec["admin_url"]), timeout=ASK_TIMEOUT, trust_env=False)
    web = app(Path(spec["site_dir"]), AdminApi(client), spec.get("store_url"))
    server = uvicorn.Server(uvicorn.Config(web, lifespan="off", access_log=False, log_config=None,
                                           server_header=False, date_header=False))
    log.info("dashboard of %s serving for router pid %s", spec["site_dir"], spec["parent"])
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
