"""The dashboard's models page lists each weighted route: targets, catalog weights, the share
each gets now and the guard's state (issue #37), as views.models.routes_view gives them.

Asked of a real router's admin listener over the example site with a route added, and of the
dashboard with the routers' runtime handed in (DashboardSources), one reason made hostile, as
a router's text could carry, to show it stays text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from llmgw.views import Runtime, SiteDataCache
from llmgw.web import DashboardSources, dashboard_router
from llmgw.web import handed_in as fixed_runtime  # this module has its own handed_in()
from tests.support.example_site import example_site
from tests.support.router import site_router
from tests.views.test_routes_view import ROUTE, report

HOSTILE = '<script>alert(1)</script>"'


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = example_site(tmp_path)
    (root / "catalog" / "routes.yaml").write_text(ROUTE)
    return root


def cells(html: str, route: str, target: str) -> list[str]:
    m = re.search(rf'<tr data-route="{re.escape(route)}" data-target="{re.escape(target)}">(.*?)</tr>', html, re.S)
    assert m, f"no row for {route} -> {target}"
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", m.group(1), re.S)]


def guard_line(html: str, route: str) -> str:
    m = re.search(rf'<tr data-route-guard="{re.escape(route)}"><td[^>]*>(.*?)</td>', html, re.S)
    assert m, f"no guard line for {route}"
    return re.sub(r"\s+", " ", m.group(1)).strip()


def handed_in(root: Path, runtime: Runtime) -> str:
    app = FastAPI()
    app.include_router(dashboard_router(DashboardSources(site=SiteDataCache(root), runtime=fixed_runtime(runtime))))
    resp = TestClient(app).get("/models")
    assert resp.status_code == 200, resp.text
    return resp.text


@pytest.fixture
def router_page(site: Path, tmp_path: Path) -> Iterator[str]:
    with site_router(site, tmp_path) as server:
        resp = httpx.get("http://{}:{}/models".format(*server.addresses["admin"]), timeout=60)
        assert resp.status_code == 200, resp.text
        yield resp.text


def test_the_router_dashboard_lists_the_route_and_does_not_guess_its_split(router_page: str) -> None:
    """The router's own dashboard asks its admin API for the route reports (llmgw.web.process); this
    router's state does not route `chat` yet (the catalog is not applied): weights from the
    catalog, the share and the guard's state not known, never the catalog's weights passed off
    as shares."""
    assert "<h2>Weighted routes</h2>" in router_page
    assert cells(router_page, "chat", "llama-3.1-70b") == [
        "chat", "assistant", "llama-3.1-70b stable", "90%", "not known", "not known"]
    assert cells(router_page, "chat", "qwen2.5-7b") == ["qwen2.5-7b", "10%", "not known", "not known"]
    assert guard_line(router_page, "chat") == (
        "chat: guard: errors above 5% or TTFT p90 above 2 s over 1m (at least 20 requests)"
        " · shares and guard not known: the routers do not route it yet (apply the catalog)")


def test_a_tripped_canary_since_when_and_why_escaped(site: Path) -> None:
    tripped = report(True, at="2026-12-04T04:40:00.000+00:00")
    tripped["chat"]["targets"][1]["reason"] = HOSTILE
    html = handed_in(site, Runtime.from_replicas([("r1", [])], routes={"r1": tripped}))
    assert cells(html, "chat", "llama-3.1-70b")[2:] == ["llama-3.1-70b stable", "90%", "100%",
                                                        "takes the tripped share"]
    assert cells(html, "chat", "qwen2.5-7b") == [
        "qwen2.5-7b", "10%", "0%",
        "tripped since 2026-12-04T04:40:00.000+00:00: &lt;script&gt;alert(1)&lt;/script&gt;&#34;"]
    assert HOSTILE not in html and "<script>" not in html
    assert "not known" not in guard_line(html, "chat")


def test_a_holding_guard_and_no_routes(site: Path, tmp_path: Path) -> None:
    html = handed_in(site, Runtime.from_replicas([("r1", [])], routes={"r1": report(False)}))
    assert cells(html, "chat", "llama-3.1-70b")[4:] == ["90%", "-"]
    assert cells(html, "chat", "qwen2.5-7b") == ["qwen2.5-7b", "10%", "10%", "holding"]
    plain = handed_in(example_site(tmp_path / "plain"), Runtime.unknown("no router here"))
    assert "Weighted routes" not in plain and "data-route" not in plain
