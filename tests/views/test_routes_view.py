"""The dashboard's weighted routes (views.models.routes_view): catalog weights beside the shares
the routers report now, and the guard's state, "not known" whenever a router did not say.

The example site with a route added, as docs/routes.md writes one: `chat` sends 90 % to
llama-3.1-70b and 10 % to qwen2.5-7b, guarded. The routers' reports are in the shape of the
admin API's route report (router/routes.py RouteRuntime.report()).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmgw.site import Site
from llmgw.views import Runtime, SiteData
from llmgw.views.models import routes_view
from llmgw.views.planned import load_site_data
from tests.support.example_site import example_site

ROUTE = """\
models:
  - name: chat
    aliases: [assistant]
    routes:
      - {model: llama-3.1-70b, weight: 90}
      - {model: qwen2.5-7b, weight: 10}
    guard: {max_error_rate: 0.05, max_ttft_p90: 2s, window: 1m}
"""
REASON = ("qwen2.5-7b broke the guard of route chat: 40.0% of its last 20 requests failed in 60 s "
          "(max_error_rate 5%); its share goes to llama-3.1-70b until the route changes")


def with_route(tmp: Path, route: str = ROUTE) -> SiteData:
    root = example_site(tmp)
    (root / "catalog" / "routes.yaml").write_text(route)
    return load_site_data(Site.load(root))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteData]:
    yield with_route(tmp_path_factory.mktemp("routes"))


def report(tripped: bool, *, at: str | None = None) -> dict[str, Any]:
    canary: dict[str, Any] = {"model": "qwen2.5-7b", "weight": 10, "share": 0 if tripped else 10, "tripped": tripped}
    if tripped:
        canary["reason"] = REASON
        if at is not None:
            canary["tripped_at"] = at
    return {"chat": {"stable": "llama-3.1-70b", "generation": "g1", "guard": {},
                     "targets": [{"model": "llama-3.1-70b", "weight": 90, "share": 100 if tripped else 90,
                                  "tripped": False}, canary]}}


def runtime(*reports: dict[str, Any], missing: tuple[str, ...] = ()) -> Runtime:
    names = [f"r{i + 1}" for i in range(len(reports))]
    return Runtime.from_replicas([(n, []) for n in names], missing=missing,
                                 routes=dict(zip(names, reports, strict=True)))


def rows(view: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(t["model"], t["weight"], t["stable"], t["share"], t["tripped"], t["reason"], t["since"])
            for r in view for t in r["targets"]]


def test_a_tripped_canary_shows_its_share_gone_since_when_and_why(data: SiteData) -> None:
    view = routes_view(data, runtime(report(True, at="2026-12-04T04:40:00.000+00:00")))
    assert [(r["name"], r["aliases"], r["stable"], r["state"], r["not_known"]) for r in view] == [
        ("chat", ["assistant"], "llama-3.1-70b", "tripped", None)]
    assert view[0]["guard"] == "errors above 5% or TTFT p90 above 2 s over 1m (at least 20 requests)"
    assert rows(view) == [("llama-3.1-70b", 90, True, 100, False, None, None),
                          ("qwen2.5-7b", 10, False, 0, True, REASON, "2026-12-04T04:40:00.000+00:00")]


def test_a_holding_guard_and_two_routers_that_differ(data: SiteData) -> None:
    view = routes_view(data, runtime(report(False)))
    assert view[0]["state"] == "holding"
    assert rows(view) == [("llama-3.1-70b", 90, True, 90, False, None, None),
                          ("qwen2.5-7b", 10, False, 10, False, None, None)]
    # One router tripped the canary, the other did not: tripped (r2 sends it nothing), and the
    # shares differ between the routers, so none is given; the router did not say since when.
    view = routes_view(data, runtime(report(False), report(True)))
    assert view[0]["state"] == "tripped"
    assert rows(view) == [("llama-3.1-70b", 90, True, None, False, None, None),
                          ("qwen2.5-7b", 10, False, None, True, REASON, None)]


@pytest.mark.parametrize(("rt", "why"), [
    (Runtime.unknown("no router to ask"), "no router answered"),
    (Runtime.from_replicas([("r1", [])]), "the routers did not report their routes"),
    (runtime({}), "the routers do not route it yet (apply the catalog)"),
    (runtime(report(False), missing=("r2",)), "not every router answered (r2)"),
])
def test_what_the_routers_did_not_say_is_not_known(data: SiteData, rt: Runtime, why: str) -> None:
    view = routes_view(data, rt)
    assert [(r["state"], r["not_known"]) for r in view] == [("not known", why)]
    assert rows(view) == [("llama-3.1-70b", 90, True, None, None, None, None),
                          ("qwen2.5-7b", 10, False, None, None, None, None)]


def test_a_route_without_a_guard(tmp_path: Path) -> None:
    data = with_route(tmp_path, ROUTE.replace("    guard: {max_error_rate: 0.05, max_ttft_p90: 2s, window: 1m}\n", ""))
    view = routes_view(data, runtime(report(False)))
    assert [(r["state"], r["guard"]) for r in view] == [("no guard", None)]
    assert routes_view(load_site_data(Site.load(example_site(tmp_path / "plain"))), Runtime.unknown()) == []


def test_one_routers_reports_handed_to_its_dashboard_are_its_runtimes_routes(data: SiteData) -> None:
    """The router's dashboard asks its routes apart from its replicas (web/dashboard.py: a router
    merges its workers' guard findings asynchronously): Runtime.with_routes is the merge
    from_replicas makes of the same reports."""
    one = Runtime.from_replicas([("this router", [])])
    assert one.routes is None
    handed = one.with_routes(report(True, at="2026-12-04T04:40:00+00:00"))
    assert handed.routes == Runtime.from_replicas(
        [("this router", [])], routes={"this router": report(True, at="2026-12-04T04:40:00+00:00")}).routes
    assert routes_view(data, handed) == routes_view(data, Runtime.from_replicas(
        [("r1", [])], routes={"r1": report(True, at="2026-12-04T04:40:00+00:00")}))
