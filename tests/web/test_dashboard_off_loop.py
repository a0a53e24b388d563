"""The dashboard's pages are built off the router's event loop.

The admin listener (with the dashboard) and the client listener share one event loop in
one process (llmgw.router.server): a page that computed its views or rendered its template
on the loop would hold every client request for as long (seconds for a 4,096-host fabric).
Here a page's view is held mid-way, on purpose, while the client listener is asked: it
must answer before the page is let go.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import llmgw.web.dashboard as dashboard
from llmgw.router import RouterServer
from tests.support.example_site import example_site
from tests.support.router import site_router


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterServer]:
    root = example_site(tmp_path)
    with site_router(root, tmp_path) as server:
        yield server


@pytest.mark.parametrize("path, view", [("/fabrics", "fabrics_list"), ("/nodes", "nodes_view"),
                                        ("/", "status_view")])
def test_a_slow_page_does_not_hold_the_client_listener(router: RouterServer, monkeypatch: pytest.MonkeyPatch,
                                                        path: str, view: str) -> None:
    entered, release = threading.Event(), threading.Event()
    real = getattr(dashboard, view)

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(60), "the test never let the page go"
        return real(*args, **kwargs)

    monkeypatch.setattr(dashboard, view, held)
    admin = "http://{}:{}".format(*router.addresses["admin"])
    client = "http://{}:{}".format(*router.addresses["client"])
    pages: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: pages.append(httpx.get(admin + path, timeout=60)))
    asking.start()
    try:
        assert entered.wait(30), f"{path} never reached {view}"
        # The page is inside its view now; the loop must still serve both listeners.
        assert httpx.get(client + "/health", timeout=10).status_code == 200
        assert httpx.get(admin + "/static/style.css", timeout=10).status_code == 200
        assert not pages, "the page finished while held"
    finally:
        release.set()
        asking.join(60)
    assert pages and pages[0].status_code == 200


def test_a_page_is_built_with_the_collector_paused(router: RouterServer, monkeypatch: pytest.MonkeyPatch) -> None:
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
    admin = "http://{}:{}".format(*router.addresses["admin"])
    assert httpx.get(admin + "/replicas", timeout=30).status_code == 200
    assert seen == [False]
    assert gc.isenabled()
