"""The dashboard's model page: the model's stored `llmgw bench` and `llmgw check` results,
read from the router's own store, in Chromium."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.sync_api import Page, expect

from llmgw.store import BenchRecord, CheckRecord, open_store
from tests.browser.conftest import Dashboard, screenshot

pytestmark = pytest.mark.browser


def test_model_page_shows_bench_and_check_results(page: Page, dashboard: Dashboard,
                                                  console_problems: list[str]) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    store = open_store(f"sqlite:///{dashboard.site / 'store.sqlite'}")  # the router's store, as `llmgw bench` writes it
    try:
        store.add_bench(BenchRecord("bench-ui-1", "deepseek-v3", "h100x8", "sglang", "sglang 0.5.23", "gpu-01",
                                    now, 16, 256, 2, 512, 128, 30.0, 1234.5, 180.0, 420.5, 21.0, 33.0))
        store.add_checks([CheckRecord("run-ui-1", "deepseek-v3", cap, status, detail, "h100x8", "sglang",
                                      "sglang 0.5.23", "gpu-01", now)
                          for cap, status, detail in (("chat", "pass", "8 tokens"),
                                                      ("tools", "fail", "tools: the reply has no tool call"),
                                                      ("embeddings", "unsupported", "embeddings: HTTP 501"))])
    finally:
        store.close()
    page.goto(dashboard.url + "/models")
    page.locator("tr[data-model='deepseek-v3'] a", has_text="results").click()
    expect(page.locator("h1")).to_have_text("deepseek-v3")
    row = page.locator("tr[data-bench='bench-ui-1']")
    expect(row).to_contain_text("sglang 0.5.23")
    expect(row).to_contain_text("180.0 / 420.5")
    expect(row).to_contain_text("1234.5")
    tools = page.locator("tr[data-run='run-ui-1'] [data-capability='tools']")
    expect(tools).to_have_text("tools: fail")
    expect(tools).to_have_attribute("title", "fail: tools: the reply has no tool call")
    expect(tools).to_have_class("pill bad")
    screenshot(page, "model-results")

    page.goto(dashboard.url + "/models/llama-3.1-70b")  # no results yet: says what makes them
    expect(page.locator("main")).to_contain_text("llmgw bench llama-3.1-70b")

    missing = page.goto(dashboard.url + "/models/no-such-model")
    assert missing is not None and missing.status == 404
    console_problems.clear()  # the 404 is expected
