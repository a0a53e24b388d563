"""Every dashboard page in a real headless Chromium, with the example site's data.

The router's admin listener serves the pages (real uvicorn on loopback); each test opens
a page, checks what the example fleet must show there, and saves a screenshot under
artifacts/screenshots/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import UNHEALTHY, Dashboard, screenshot

pytestmark = pytest.mark.browser


def test_overview(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/")
    expect(page.locator("h1")).to_have_text("Overview")
    h100 = page.locator("table.capacity tr[data-class='H100-80GB'] td")
    # 8 H100 nodes x 8 = 64; deepseek-v3-1 holds 16, the two llama-3.1-70b replicas 8;
    # gpu-node-06 GPU 3 and gpu-node-07 GPU 5 are unhealthy; gpu-node-08 (cordoned) holds 8 back.
    expect(h100).to_have_text(["H100-80GB", "", "24", "30", "8", "2", "64", "8"])
    expect(page.locator("table.capacity tr[data-class='H100-80GB'] .bar span")).to_have_count(4)
    body = page.locator("main")
    for name in ("grok-1", "llama-3.1-405b", "llama-4-maverick"):
        expect(body).to_contain_text(name)
    expect(body).to_contain_text("fabric ib-0c42a10300c70000: 3 nodes with 8 GPUs free, needs 6")
    screenshot(page, "overview")


def test_nodes_and_a_node(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/nodes")
    rows = page.locator("table.nodes tbody tr")
    expect(rows).to_have_count(20)  # inventories/example: 20 hosts
    expect(page.locator("tr[data-node='gpu-node-06']")).to_contain_text("1 bad")
    expect(page.locator("tr[data-node='a100-node-03']")).to_contain_text("stale")
    expect(page.locator("tr[data-node='new-01']")).to_contain_text("never")
    # The H200 hosts' stack, and the fleet's versions under the table (unknown counted apart).
    expect(page.locator("tr[data-node='gpu-node-09'] td.stack")).to_have_text("580.95.05/13.0 rdma 50.0-2 fm active")
    expect(page.locator("tr[data-node='gpu-node-10'] td.stack")).to_have_text("535.183.01/12.2")
    drivers = page.locator("table.versions tr[data-versions='driver']")
    expect(drivers.locator("[data-version='580.95.05']")).to_have_text("580.95.05: 1")
    expect(drivers).to_contain_text("unknown: 18")
    screenshot(page, "nodes")
    page.locator("a", has_text="gpu-node-06").first.click()
    expect(page.locator("h1")).to_have_text("gpu-node-06")
    expect(page.locator("main")).to_contain_text("uncorrectable ECC errors")
    expect(page.locator("main")).to_contain_text("llama-3.1-70b-1")
    screenshot(page, "node-gpu-node-06")


def test_node_page_for_a_node_without_facts(page: Page, dashboard: Dashboard, console_problems: list[str]) -> None:
    page.goto(dashboard.url + "/nodes/new-01")
    expect(page.locator("main")).to_contain_text("never (no facts gathered)")
    resp = page.goto(dashboard.url + "/nodes/no-such-node")
    assert resp is not None and resp.status == 404
    expect(page.locator(".error-message")).to_have_text("no node 'no-such-node' in the inventory")
    assert all("404" in p for p in console_problems)
    console_problems.clear()


def test_models(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/models")
    status = {m: page.locator(f"tr[data-model='{m}'] td").nth(4) for m in
              ("deepseek-v3", "grok-1", "qwen2.5-7b", "qwen2.5-coder-14b", "llama-3.1-70b")}
    expect(status["deepseek-v3"]).to_contain_text("ready")
    expect(status["grok-1"]).to_contain_text("not placed")
    expect(status["qwen2.5-7b"]).to_contain_text("on demand")
    expect(status["qwen2.5-coder-14b"]).to_contain_text("starting")
    expect(page.locator("tr[data-model='llama-3.1-70b'] td").nth(3)).to_contain_text("2/2")
    # The weighted route: the catalog's weights. The router reports its routes, but the applied
    # state it serves has no `chat` route yet, so the share and the guard's state are not known
    # (never the weights passed off as shares) and the page says why: the catalog is not applied.
    canary = page.locator("tr[data-route='chat'][data-target='qwen2.5-7b'] td")
    expect(canary).to_have_text(["qwen2.5-7b", "10%", "not known", "not known"])
    expect(page.locator("tr[data-route='chat'][data-target='llama-3.1-70b'] td").nth(3)).to_have_text("90%")
    guard = page.locator("tr[data-route-guard='chat'] td")
    expect(guard).to_contain_text("the routers do not route it yet (apply the catalog)")
    screenshot(page, "models")


def test_replicas_show_the_unhealthy_one_under_the_table(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/replicas")
    expect(page.locator("table.replicas tbody tr[data-replica]")).to_have_count(4)
    expect(page.locator("tr[data-replica='deepseek-v3-1']")).to_contain_text("gpu-node-01:0-7 gpu-node-02:0-7")
    # The router's health checks find the closed port: the error shows under the table.
    errors = page.locator("ul.errors")
    expect(errors).to_contain_text(f"{UNHEALTHY}: unhealthy at the router", timeout=15_000)
    expect(page.locator("tr[data-replica='deepseek-v3-1'] td").nth(5)).to_have_text("-")  # never used
    screenshot(page, "replicas")


def test_failures_list_every_reason(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/failures")
    expect(page.locator("section.failure")).to_have_count(3)
    grok = page.locator("section#grok-1")
    expect(grok).to_contain_text("gpu-node-08")
    expect(grok).to_contain_text("cordoned")
    screenshot(page, "failures")


def test_usage_per_key_and_group_escapes_names(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/usage")
    main = page.locator("main")
    expect(main).to_contain_text("alice")
    expect(main).to_contain_text("bob <script>")  # shown as text, not run as markup
    assert page.locator("main script").count() == 0
    expect(page.locator("table").nth(1)).to_contain_text("research")
    screenshot(page, "usage")


def test_fabrics_list(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/fabrics")
    expect(page.locator("main table tbody tr")).to_have_count(2)
    expect(page.locator("main")).to_contain_text(re.compile("misaligned"))
    screenshot(page, "fabrics")
