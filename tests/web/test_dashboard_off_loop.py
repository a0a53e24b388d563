"""The dashboard's pages are built off its event loop, with the cyclic collector paused.

The dashboard serves from a process of its own (llmgw.web.process), but that process's one
loop still serves every other page, the stylesheet and apply's download posts: a page that
computed its views or rendered its template on the loop would hold them all for as long
(seconds for a 4,096-host fabric). Here a page's view is held mid-way, on purpose, while
the same server is asked for the stylesheet: it must answer before the page is let go.
(That the router's own listeners never wait on a page is tests/router/test_dashboard_child.py.)
"""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

import llmgw.web.dashboard as dashboard
from llmgw.views import Runtime, SiteDataCache
from llmgw.web import DashboardSources, dashboard_router, handed_in
from tests.support.example_site import example_site
from tests.support.waiting import wait_until


def _app(root: Path) -> FastAPI:
    app = FastAPI()
    app.include_router(dashboard_router(DashboardSources(site=SiteDataCache(root),
                                                         runtime=handed_in(Runtime.unknown("no router here")))))
    return app


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(_app(example_site(tmp_path)), log_config=None, access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "the dashboard's uvicorn")
        yield "http://{}:{}".format(*sock.getsockname())
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


@pytest.mark.parametrize("path, view", [("/fabrics", "fabrics_list"), ("/nodes", "nodes_view"),
                                        ("/", "status_view")])
def test_a_slow_page_does_not_hold_the_dashboards_loop(served: str, monkeypatch: pytest.MonkeyPatch,
                                                       path: str, view: str) -> None:
    entered, release = threading.Event(), threading.Event()
    real = getattr(dashboard, view)

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(60), "the test never let the page go"
        return real(*args, **kwargs)

    monkeypatch.setattr(dashboard, view, held)
    pages: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: pages.append(httpx.get(served + path, timeout=60)))
    asking.start()
    try:
        assert entered.wait(30), f"{path} never reached {view}"
        # The page is inside its view now; the loop must still serve the rest.
        assert httpx.get(served + "/static/style.css", timeout=10).status_code == 200
        assert httpx.get(served + "/api/v1/downloads", timeout=10).status_code == 200
        assert not pages, "the page finished while held"
    finally:
        release.set()
        asking.join(60)
    assert pages and pages[0].status_code == 200


def test_a_page_is_built_with_the_collector_paused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's short-lived objects set off collector passes that walked the whole loaded site
    (millions of objects at 4,096 hosts: `/replicas` 1.0 s, 0.35 s of it its own work); the
    collector runs again once the page is built."""
    seen: list[bool] = []
    real = dashboard.replicas_view

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(dashboard, "replicas_view", watched)
    assert gc.isenabled()
    assert TestClient(_app(example_site(tmp_path))).get("/replicas").status_code == 200
    assert seen == [False]
    assert gc.isenabled()
