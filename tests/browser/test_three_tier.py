"""A three-tier fabric (core, spine, leaf) on the dashboard served on its own, without a router."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot, tooltips

pytestmark = pytest.mark.browser


def test_three_tiers_in_three_rows(page: Page, three_tier: str) -> None:
    fabrics = httpx.get(f"{three_tier}/api/v1/fabrics", timeout=60).json()["fabrics"]
    fid = next(f["id"] for f in fabrics if "core" in f["switches"])
    topo = httpx.get(f"{three_tier}/api/v1/fabrics/{fid}/topology", timeout=60).json()
    page.goto(f"{three_tier}/fabrics/{fid}")
    svg = page.locator("svg#fabric")
    expect(svg.locator("g.switch")).to_have_count(len(topo["switches"]))
    expect(svg.locator("line.cable")).to_have_count(len(topo["links"]))
    rows = {}
    for tier in ("core", "spine", "leaf"):
        ys = svg.locator(f"g.switch[data-tier='{tier}'] rect").evaluate_all(
            "els => els.map(e => Number(e.getAttribute('y')))")
        assert len(set(ys)) == 1, (tier, ys)
        rows[tier] = ys[0]
    assert rows["core"] < rows["spine"] < rows["leaf"]
    # Every cable's tooltip, switch to switch too, names both ends and ports as the topology does.
    assert sorted(tooltips(svg.locator("g.cables line.cable"))) == sorted(
        f"{lk['a']['name']} port {lk['a']['port']} — {lk['b']['name']} port {lk['b']['port']}: {lk['rate']}"
        + (f" (expected {lk['expected']}; degraded)" if lk["degraded"] else "") for lk in topo["links"])
    screenshot(page, "fabric-three-tier")


def test_pages_without_a_router(page: Page, three_tier: str) -> None:
    page.goto(f"{three_tier}/usage")
    expect(page.locator("main")).to_contain_text("this dashboard has no router behind it")
    page.goto(f"{three_tier}/")
    expect(page.locator("main")).to_contain_text("Not known: no router answered.")
    expect(page.locator("main")).to_contain_text("stopped")
