"""The dashboard's routes. Read-only, but for one POST: apply's download progress
(`/api/v1/downloads`, llmgw.views.live_downloads), kept in memory and only shown.

The dashboard needs a site (catalog, inventory, facts, state) besides the router: a
router started with one (`llmgw -C SITE router serve`) serves these routes on its admin
listener from a process of its own (process.py, llmgw.router.dashboard_child). What only
the router knows (in-flight counts, last use, usage per key) comes through
`DashboardSources`, asked of the router's admin API there, so a test or another host can
hand in its own — and this package never imports the router.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from llmgw import collector
from llmgw.errors import FabricError, LlmgwError
from llmgw.state.summary import site_state_summary, summary_line
from llmgw.views import Runtime, SiteData, SiteDataCache
from llmgw.views.download_board import DownloadBoard
from llmgw.views.fabric_copy import overview as fabric_overview
from llmgw.views.models import models_view, placement_failures, routes_view
from llmgw.views.nodes import node_detail, nodes_view
from llmgw.views.replicas import idle_text, replicas_view
from llmgw.views.status import fabrics_list, status_view
from llmgw.views.text import duration, human_bytes
from llmgw.views.versions import shown
from llmgw.web import fabric_svg
from llmgw.web.history import history_router

RuntimeSource = Callable[[], Awaitable[Runtime]]
UsageSource = Callable[[str | None], Awaitable[dict[str, Any]]]
MAX_DOWNLOADS_BODY = 4 * 1024 * 1024
# model name -> its record in the admin API's /api/v1/models: `endpoints`, the endpoints the
# router forwards for it ("POST /v1/chat/completions", ...), and for a weighted route `route`
ModelsSource = Callable[[], Awaitable[dict[str, dict[str, Any]]]]
# model name -> its stored bench and check results (llmgw.views.results.results_of)
ResultsSource = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class DashboardSources:
    site: SiteDataCache
    runtime: RuntimeSource
    usage: UsageSource | None = None
    # the router's models (the endpoints it forwards, its weighted routes' reports): asked
    # apart from `runtime`, and only by the models page, in one request
    models: ModelsSource | None = None
    # apply's download progress as posted to this dashboard; None: one of its own
    downloads: DownloadBoard | None = None
    results: ResultsSource | None = None


def handed_in(runtime: Runtime) -> RuntimeSource:
    """A runtime handed in whole: a dashboard with no router to ask (a test, a benchmark)."""
    async def get() -> Runtime:
        return runtime
    return get


def short_endpoint(key: str) -> str:
    """`POST /v1/chat/completions` -> `chat/completions`; other methods stay: `GET responses/{id}`."""
    method, _, path = key.partition(" ")
    path = path.removeprefix("/v1/")
    return path if method == "POST" else f"{method} {path}"


def _env() -> Environment:
    env = Environment(loader=PackageLoader("llmgw.web", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["duration"] = duration
    env.filters["bytes"] = human_bytes
    env.filters["version"] = shown  # a host-reported version: printable, short
    env.filters["idle"] = idle_text
    env.filters["endpoint"] = short_endpoint
    env.filters["num"] = lambda n: f"{n:,}".replace(",", "\u202f")  # 5 000 000: thin spaces
    env.globals["pages"] = [("/", "Overview"), ("/nodes", "Nodes"), ("/models", "Models"),
                            ("/replicas", "Replicas"), ("/failures", "Placement failures"),
                            ("/usage", "Usage"), ("/history", "History"), ("/fabrics", "Fabrics")]
    return env


def _stylesheet() -> str:
    return (resources.files("llmgw.web") / "static" / "style.css").read_text(encoding="utf-8")


def dashboard_router(sources: DashboardSources) -> APIRouter:
    env = _env()
    api = APIRouter()
    css = _stylesheet()
    board = sources.downloads or DownloadBoard()

    def page(template: str, request: Request, status_code: int = 200, **ctx: Any) -> HTMLResponse:
        html = env.get_template(template).render(path=request.url.path, now=datetime.now(UTC), **ctx)
        return HTMLResponse(html, status_code=status_code)

    async def load(request: Request) -> SiteData | HTMLResponse:
        try:
            return await asyncio.to_thread(sources.site.get)
        except LlmgwError as exc:
            return page("error.html", request, 503, title="Site not readable", message=exc.message,
                        detail=list(exc.detail), hint=exc.hint)

    def not_found(request: Request, what: str) -> HTMLResponse:
        return page("error.html", request, 404, title="Not found", message=what, detail=[], hint=None)

    async def off_loop(make: Callable[[], HTMLResponse]) -> HTMLResponse:
        """A page's views and template, in a worker thread: a page of a 4,096-host site takes up
        to seconds of CPU, which on the loop would hold every other page, the download
        board's posts and the static files for as long. Whatever the loop owns (the runtime,
        the download board) is read on the loop, before, and handed in.

        The cyclic collector is paused meanwhile (llmgw.collector), as it is while the site
        loads: a page makes tens of thousands of short-lived dicts and strings, and each pass
        they set off walked every object the loaded site holds (millions at 4,096 hosts):
        `/replicas` took 1.0 s, 0.35 s of it the page's own work."""
        return await asyncio.to_thread(collector.paused()(make))

    @api.get("/static/style.css", include_in_schema=False)
    async def stylesheet() -> Response:
        return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def overview(request: Request) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        runtime, downloads = await sources.runtime(), board.current()["downloads"]
        # Who wrote the state and who holds its lock (a PostgreSQL state's history), off the loop.
        state = await asyncio.to_thread(site_state_summary, data.site)
        return await off_loop(lambda: page(
            "overview.html", request, title="Overview", view=status_view(data, runtime, datetime.now(UTC)),
            site=str(data.site.root), state_line=summary_line(state), downloads=downloads))

    @api.get("/nodes", response_class=HTMLResponse, include_in_schema=False)
    async def nodes(request: Request) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        return await off_loop(lambda: page("nodes.html", request, title="Nodes", view=nodes_view(data)))

    @api.get("/nodes/{name}", response_class=HTMLResponse, include_in_schema=False)
    async def node(request: Request, name: str) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data

        def make() -> HTMLResponse:
            try:
                rec = node_detail(data, name)  # reads the page file of each fabric the node is on, once
            except LlmgwError as exc:
                return page("error.html", request, 503, title="Node not readable", message=exc.message,
                            detail=list(exc.detail), hint=exc.hint)
            if rec is None:
                return not_found(request, f"no node {name!r} in the inventory")
            return page("node.html", request, title=name, node=rec)
        return await off_loop(make)

    @api.get("/models", response_class=HTMLResponse, include_in_schema=False)
    async def models(request: Request) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        runtime = await sources.runtime()
        endpoints: Callable[[str], list[str]] | None = None
        if sources.models is not None:
            records = await sources.models()
            runtime = runtime.with_routes({name: m["route"] for name, m in records.items()
                                           if isinstance(m.get("route"), dict)})

            def endpoints(name: str) -> list[str]:
                return [str(e) for e in records.get(name, {}).get("endpoints") or ()]
        return await off_loop(lambda: page("models.html", request, title="Models", view=models_view(data, runtime),
                                           routes=routes_view(data, runtime), endpoints=endpoints))

    @api.get("/models/{name}", response_class=HTMLResponse, include_in_schema=False)
    async def model(request: Request, name: str) -> HTMLResponse:
        """One model with its stored `llmgw bench` and `llmgw check` results."""
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        runtime = await sources.runtime()
        view = await asyncio.to_thread(models_view, data, runtime)
        rec = next((m for m in view["models"] if name == m["name"] or name in m["aliases"]), None)
        if rec is None:
            return not_found(request, f"no model {name!r} in the catalog")
        results = await asyncio.to_thread(sources.results, rec["name"]) if sources.results else None
        return await off_loop(lambda: page("model.html", request, title=rec["name"], model=rec, results=results))

    @api.get("/replicas", response_class=HTMLResponse, include_in_schema=False)
    async def replicas(request: Request, model: str | None = None) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        runtime, by_node, downloads = await sources.runtime(), board.by_node(), board.current()["downloads"]
        return await off_loop(lambda: page(
            "replicas.html", request, title="Replicas", downloads=downloads,
            view=replicas_view(data, runtime, datetime.now(UTC), model=model or None, downloads=by_node)))

    @api.get("/failures", response_class=HTMLResponse, include_in_schema=False)
    async def failures(request: Request) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        return await off_loop(lambda: page("failures.html", request, title="Placement failures",
                                           failures=placement_failures(data), notes=list(data.placement.notes)))

    @api.get("/usage", response_class=HTMLResponse, include_in_schema=False)
    async def usage(request: Request, day: str | None = None) -> HTMLResponse:
        if sources.usage is None:
            view: dict[str, Any] | None = None
            error = "this dashboard has no router behind it, so no usage"
        else:
            try:
                view, error = await sources.usage(day), None
            except LlmgwError as exc:
                view, error = None, exc.message
        return page("usage.html", request, title="Usage", view=view, error=error)

    @api.get("/fabrics", response_class=HTMLResponse, include_in_schema=False)
    async def fabrics(request: Request) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data
        return await off_loop(lambda: page("fabrics.html", request, title="Fabrics", fabrics=fabrics_list(data),
                                           notes=list(data.notes)))

    @api.get("/fabrics/{fabric_id}", response_class=HTMLResponse, include_in_schema=False)
    async def fabric(request: Request, fabric_id: str) -> HTMLResponse:
        data = await load(request)
        if isinstance(data, HTMLResponse):
            return data

        def make() -> HTMLResponse:
            try:
                fid = data.fabrics.find(fabric_id)
            except FabricError as exc:
                return not_found(request, exc.message)
            try:  # laid out on the bastion at apply (a router's) or here (llmgw.views.fabrics)
                drawing, topology = data.fabrics.drawing(fid), data.fabrics.topology(fid)
            except LlmgwError as exc:
                return page("error.html", request, 503, title="Fabric not readable", message=exc.message,
                            detail=list(exc.detail), hint=exc.hint)
            return page("fabric.html", request, title=f"Fabric {fid}", fabric=fabric_overview(topology),
                        drawing=drawing, cables=fabric_svg.cables(drawing), switches=fabric_svg.switches(drawing),
                        adapters=fabric_svg.adapters(drawing), details=fabric_svg.details(drawing))
        return await off_loop(make)

    @api.post("/api/v1/downloads", include_in_schema=False)
    async def post_downloads(request: Request) -> Response:
        """Apply's download progress (llmgw.views.live_downloads.DownloadFeed), every couple of seconds."""
        if int(request.headers.get("content-length") or 0) > MAX_DOWNLOADS_BODY:
            return JSONResponse({"error": {"message": "too large", "type": "invalid_request", "code": 413}}, 413)
        try:
            board.post(json.loads(await request.body()))
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request", "code": 400}}, 400)
        return Response(status_code=204)

    @api.get("/api/v1/downloads")
    async def downloads_json() -> JSONResponse:
        """The downloads apply is running: host, cache entry, bytes, total, rate, ETA, replicas."""
        return JSONResponse(board.current())

    @api.get("/api/v1/fabrics")
    async def fabrics_json() -> JSONResponse:
        data = await asyncio.to_thread(sources.site.get)
        return JSONResponse({"fabrics": await asyncio.to_thread(fabrics_list, data)})

    @api.get("/api/v1/fabrics/{fabric_id}/topology")
    async def topology(fabric_id: str) -> JSONResponse:
        """The fabric as `llmgw fabrics show --json` prints it: switches by tier, hosts and
        their adapters, every cable with its rate, the degraded ones, rails."""
        data = await asyncio.to_thread(sources.site.get)

        def make() -> JSONResponse:  # the whole fabric, and 100,000 cables at 4,096 hosts: off the loop
            try:
                fid = data.fabrics.find(fabric_id)
            except FabricError as exc:
                return JSONResponse({"error": {"message": exc.message, "type": "not_found", "code": 404}}, 404)
            try:
                return JSONResponse(data.fabrics.topology(fid))
            except LlmgwError as exc:
                return JSONResponse({"error": {"message": exc.message, "type": "unavailable", "code": 503}}, 503)
        return await asyncio.to_thread(make)

    api.include_router(history_router(sources.site, env))  # charts from the site's Prometheus (history.py)
    return api

