"""The fabric page for the shared fixture c_fattree_rails_misaligned_degraded, in Chromium.

The example site's gpu-node-01 carries that very capture in its facts, so the fabric
the dashboard draws is the fixture's; its truth.json says what must be on the page:
every switch in its tier (tiers in rows), every cable, the 1x cable of gpu-node-03
mlx5_1 in red, and gpu-node-05's crossed rails.
"""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import Page, expect

from llmgw.fabric import parse_ibnetdiscover
from tests.browser.conftest import Dashboard, screenshot, tooltips
from tests.support.example_site import EXAMPLE, FIXTURES

pytestmark = pytest.mark.browser

FIXTURE = "c_fattree_rails_misaligned_degraded"
FABRIC = "ib-0c42a10300b20000"
RED = "rgb(224, 36, 36)"


def truth() -> dict[str, object]:
    data: dict[str, object] = json.loads((FIXTURES / f"{FIXTURE}.truth.json").read_text())
    return data


def test_the_example_fabric_is_the_fixture() -> None:
    facts = json.loads((EXAMPLE / "facts" / "gpu-node-01.json").read_text())
    assert facts["ibnetdiscover"] == (FIXTURES / f"{FIXTURE}.ibnetdiscover.txt").read_text()


def test_fabric_page_draws_every_switch_and_cable(page: Page, dashboard: Dashboard) -> None:
    t = truth()
    capture = parse_ibnetdiscover((FIXTURES / f"{FIXTURE}.ibnetdiscover.txt").read_text(), source="fixture")[0]
    page.goto(f"{dashboard.url}/fabrics/{FABRIC}")
    svg = page.locator("svg#fabric")
    expect(svg).to_be_visible()

    # Every switch, in its tier; one row per tier, spines above leaves, adapters below.
    switches = t["switches"]
    assert isinstance(switches, dict)
    expect(svg.locator("g.switch")).to_have_count(len(switches))
    rows: dict[str, set[float]] = {}
    keys: dict[str, str] = {}
    for name, info in switches.items():
        g = svg.locator(f"g.switch[data-name='{name}']")
        expect(g).to_have_count(1)
        assert g.get_attribute("data-tier") == info["tier"]
        rows.setdefault(info["tier"], set()).add(float(g.locator("rect").get_attribute("y") or "nan"))
        keys[name] = g.get_attribute("data-key") or ""
    assert all(len(ys) == 1 for ys in rows.values()), rows
    (spine_y,), (leaf_y,) = rows["spine"], rows["leaf"]
    adapter_ys = {float(y or "nan") for y in svg.locator("g.adapter rect").evaluate_all(
        "els => els.map(e => e.getAttribute('y'))")}
    assert spine_y < leaf_y < min(adapter_ys) and len(adapter_ys) == 1

    # Every cable: as many lines as the capture has cables, each adapter to its truth leaf.
    expect(svg.locator("line.cable")).to_have_count(len(capture.links))
    hosts = t["hosts"]
    assert isinstance(hosts, dict)
    for host, adapters in hosts.items():
        for ca, where in adapters.items():
            cable = svg.locator(f"line.cable[data-a='ca-{host}-{ca}-1'][data-b='{keys[where['switch']]}']")
            expect(cable).to_have_count(1)

    # The degraded cable, and only it, is red.
    degraded = svg.locator("line.cable.degraded")
    expect(degraded).to_have_count(1)
    assert degraded.get_attribute("data-a") == "ca-gpu-node-03-mlx5_1-1"
    assert degraded.get_attribute("data-b") == keys["MF0;leaf-02:MQM8790/U1"]
    assert degraded.get_attribute("data-rate") == "1xHDR"
    assert degraded.evaluate("e => getComputedStyle(e).stroke") == RED
    strokes = svg.locator("line.cable:not(.degraded)").evaluate_all("els => els.map(e => getComputedStyle(e).stroke)")
    assert RED not in strokes
    expect(page.locator("table.degraded-list")).to_contain_text("gpu-node-03 mlx5_1 port 1")

    # Each cable's tooltip, made on hover, names its ends as the parser labels them.
    assert sorted(tooltips(svg.locator("g.cables line.cable"))) == sorted(
        f"{link.a.label} — {link.b.label}: {link.rate}"
        + (f" (expected {link.expected}; degraded)" if link.degraded else "") for link in capture.links)
    # And each adapter's: its port, rail and rate, and what a degraded one should run at.
    assert sorted(tooltips(svg.locator("g.adapter"))) == sorted(
        f"{h} {a.ca} port {a.port}, rail {a.rail}, {a.rate}"
        + (f" (degraded, expected {a.expected})" if a.degraded else "")
        for h, ads in capture.hosts.items() for a in ads)
    expect(page.locator("main")).to_contain_text("gpu-node-05")  # the misaligned rails
    screenshot(page, "fabric-c_fattree_rails_misaligned_degraded")
    svg.screenshot(path=str(screenshot(page, "fabric-c-full").with_name("fabric-c-drawing.png")))


def test_hover_click_and_find(page: Page, dashboard: Dashboard) -> None:
    page.goto(f"{dashboard.url}/fabrics/{FABRIC}")
    svg = page.locator("svg#fabric")
    spine = svg.locator("g.switch[data-tier='spine']").first
    spine.hover()
    expect(svg).to_have_class("fabric fit focus")
    key = spine.get_attribute("data-key")
    touching = svg.locator(f"g.cables line.cable[data-b='{key}']")
    expect(touching.first).to_have_class("el cable hit")
    # The drawing dims as a whole; what the spine touches is drawn again on top, undimmed.
    for layer in ("cables", "switches", "adapters"):
        expect(svg.locator(f"g.{layer}")).to_have_css("opacity", "0.1")
    lit = svg.locator(f"g.lit line.cable[data-b='{key}']")
    expect(lit).to_have_count(touching.count())
    expect(lit.first).to_have_css("opacity", "1")
    expect(svg.locator(f"g.lit g.switch[data-key='{key}']")).to_have_count(1)
    expect(svg.locator("g.lit line.cable[data-kind='host']")).to_have_count(0)
    screenshot(page, "fabric-hover-spine", full_page=False)
    page.mouse.move(2, 2)
    expect(svg).to_have_class("fabric fit")
    expect(svg.locator("g.lit > *")).to_have_count(0)
    expect(svg.locator(".hit")).to_have_count(0)

    svg.locator("g.adapter[data-key='ca-gpu-node-03-mlx5_1-1']").click()
    details = page.locator("#details")
    expect(details.locator("#details-title")).to_have_text("gpu-node-03 mlx5_1")
    expect(details).to_contain_text("degraded, expected 4xHDR")
    capture = parse_ibnetdiscover((FIXTURES / f"{FIXTURE}.ibnetdiscover.txt").read_text(), source="fixture")[0]
    (bad,) = capture.degraded_links
    expect(details).to_contain_text(f"{bad.a.label} — {bad.b.label}: 1xHDR (expected 4xHDR; degraded)")
    expect(details.locator("a")).to_have_attribute("href", "/nodes/gpu-node-03")

    page.fill("#find-input", "gpu-node-05")
    page.click("#find button[type=submit]")
    expect(page.locator("#find-msg")).to_have_text("4 adapters of gpu-node-05")
    expect(svg.locator("g.adapter.hit[data-host='gpu-node-05']")).to_have_count(4)
    expect(details.locator("#details-title")).to_have_text("gpu-node-05")
    screenshot(page, "fabric-find-gpu-node-05", full_page=False)
    page.fill("#find-input", "nope-99")
    page.click("#find button[type=submit]")
    expect(page.locator("#find-msg")).to_have_text("no node nope-99 on this fabric")


def test_topology_json(dashboard: Dashboard) -> None:
    r = httpx.get(f"{dashboard.url}/api/v1/fabrics/{FABRIC}/topology", timeout=60)
    assert r.status_code == 200
    body = r.json()
    assert body["id"] == FABRIC
    assert body["summary"]["degraded_links"] == 1 and body["rails"]["misaligned_hosts"] == ["gpu-node-05"]
    assert len(body["links"]) == 64
    missing = httpx.get(f"{dashboard.url}/api/v1/fabrics/ib-ffff/topology", timeout=60)
    assert missing.status_code == 404
