"""The dashboard is served from a process of the router's own, never from the router's.

A real router with a site (tests/support/router.py) and its real child, `python -m
llmgw.web.process`: pages come through the admin listener from another process, which
asks the admin API back for the runtime; a child that dies is replaced by the next
request; one that cannot start is a 503 that says so, not a hang; the router's stop ends
the child and removes its socket.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.router import RouterServer
from llmgw.router.dashboard_child import DashboardChild, loopback_url
from tests.support.example_site import example_site
from tests.support.router import site_router
from tests.support.waiting import wait_until


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterServer]:
    with site_router(example_site(tmp_path), tmp_path) as server:
        yield server


def _admin(server: RouterServer) -> str:
    return "http://{}:{}".format(*server.addresses["admin"])


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def test_pages_come_from_a_child_that_asks_the_admin_api(router: RouterServer) -> None:
    child = router.dashboard
    assert child is not None and child.proc is None, "started before any page was asked for"
    page = httpx.get(_admin(router) + "/replicas", timeout=60)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert child.proc is not None and child.proc.pid != os.getpid()
    assert child.starts == 1
    # What only the router knows came from its admin API: else the page says why it is not known.
    assert "admin API" not in page.text and "no router answered" not in page.text, page.text
    css = httpx.get(_admin(router) + "/static/style.css", timeout=30)
    assert css.status_code == 200 and css.headers["cache-control"] == "max-age=300"
    # The admin API's own paths are the router's; others the child's, in the same error shape.
    assert httpx.get(_admin(router) + "/api/v1/status", timeout=30).json()["serial"] is not None
    missing = httpx.get(_admin(router) + "/no/such/page", timeout=30)
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no such path: /no/such/page"
    assert child.starts == 1


def test_a_child_that_dies_is_replaced_by_the_next_request(router: RouterServer) -> None:
    assert httpx.get(_admin(router) + "/nodes", timeout=60).status_code == 200
    child = router.dashboard
    assert child is not None and child.proc is not None
    first = child.proc.pid
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: _gone(first), 30, "the killed dashboard process to be reaped")
    page = httpx.get(_admin(router) + "/nodes", timeout=60)
    assert page.status_code == 200, page.text
    assert child.proc is not None and child.proc.pid != first
    assert child.starts == 2


def test_a_child_that_cannot_start_is_a_503_that_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DashboardChild, "command", ("/bin/false",))
    with site_router(example_site(tmp_path), tmp_path) as router:
        first = httpx.get(_admin(router) + "/", timeout=60)
        assert first.status_code == 503
        assert first.json()["error"]["message"].startswith("the dashboard process exited (code 1) before it answered")
        again = httpx.get(_admin(router) + "/", timeout=60)  # died at once: not started again at once
        assert again.status_code == 503
        assert "keeps exiting" in again.json()["error"]["message"], again.text
        assert router.dashboard is not None and router.dashboard.starts == 1
        # The router itself is untouched.
        assert httpx.get(_admin(router) + "/health", timeout=30).status_code == 200


def test_the_routers_stop_ends_the_child_and_removes_its_socket(tmp_path: Path) -> None:
    with site_router(example_site(tmp_path), tmp_path) as router:
        assert httpx.get(_admin(router) + "/", timeout=60).status_code == 200
        child = router.dashboard
        assert child is not None and child.proc is not None
        pid, where = child.proc.pid, child.socket_dir
        assert where is not None and (where / "dashboard.sock").exists()
        assert where.stat().st_mode & 0o077 == 0, "the socket's directory is open to other users"
    assert _gone(pid)
    assert not where.exists()


@pytest.mark.parametrize("host, url", [("127.0.0.1", "http://127.0.0.1:8001"), ("0.0.0.0", "http://127.0.0.1:8001"),
                                       ("::", "http://[::1]:8001"), ("::1", "http://[::1]:8001")])
def test_the_child_reaches_the_admin_listener_on_loopback(host: str, url: str) -> None:
    assert loopback_url(host, 8001) == url
