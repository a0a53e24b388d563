"""The Models page shows, per model, the endpoints the router forwards for it (#20)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from llmgw.router.endpoints import served
from tests.browser.conftest import Dashboard

pytestmark = pytest.mark.browser


def test_models_show_the_endpoints_each_serves(page: Page, dashboard: Dashboard) -> None:
    replicas = httpx.get(dashboard.url + "/api/v1/replicas", timeout=10).json()["replicas"]
    engines = {r["engine"] for r in replicas if r["model"] == "deepseek-v3"}
    assert engines, "the example fleet runs deepseek-v3"
    expected = served(engines)
    page.goto(dashboard.url + "/models")
    pills = page.locator("tr[data-model='deepseek-v3'] td.endpoints .pill")
    expect(pills).to_have_count(len(expected))
    assert [pills.nth(i).get_attribute("title") for i in range(len(expected))] == expected
    expect(pills.first).to_have_text("chat/completions")  # the short form; the full key is the title
    models = httpx.get(dashboard.url + "/api/v1/models", timeout=10).json()["models"]
    assert next(m for m in models if m["name"] == "deepseek-v3")["endpoints"] == expected


def test_models_without_a_router_say_so(page: Page, three_tier: str) -> None:
    page.goto(f"{three_tier}/models")
    cells = page.locator("td.endpoints")
    expect(cells.first).to_have_text("no router")
    assert cells.count() > 1 and all(t == "no router" for t in cells.all_inner_texts())
