"""History from a real Prometheus, on a lab of one host with the real llama-server.

The lab's router gets a metrics listener on its management address; the llmgw_prometheus
role installs Debian's `prometheus` on the same lab host (apt inside the container),
scraping the router's /metrics and the engines' metrics the router relays at
/metrics/engines, every second. The test sends streamed and plain chat completions and
requests for a model that does not exist through the router, then waits (polling, never
sleeping) until Prometheus has them; then:

- the dashboard's /history (served here, on the bastion side, from the lab site whose
  llmgw.yaml names that Prometheus) draws the requests, TTFT, tokens and errors of
  `tiny` in Chromium;
- every query of dashboards/llmgw.json returns data, without error, from that Prometheus,
  but the fleet row's GPU and fabric queries: the lab has neither, so those gauges are
  absent (never zero); the fleet gauges it has (filesystems, replicas) are the lab's own.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from fastapi import FastAPI
from playwright.sync_api import sync_playwright

from llmgw import ansible_content
from llmgw.apply import hosts_for
from llmgw.inventory import load_inventory
from llmgw.runner import run_playbook
from llmgw.site import Site
from llmgw.views import Runtime, SiteDataCache
from llmgw.web import DashboardSources, dashboard_router, handed_in
from llmgw.web.history import BOTTOM, HEIGHT
from tests.support.lab import REPO, Lab, lab, shape
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.engine]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
GRAFANA = REPO / "dashboards" / "llmgw.json"
METRICS_PORT = 9101
PROM_PORT = 9090
STREAMS, PLAIN, MISSING = 6, 3, 2
HTTP = httpx.Client(timeout=10, trust_env=False)


@dataclass
class Metered:
    lab: Lab
    prometheus: str
    router_metrics: str


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metered]:
    # A lab of its own (not yet moved to the shared lab: its one run there could not finish).
    with lab(tmp_path_factory.mktemp("metrics"), nodes=1, prefix="llmgw-metrics") as it:
        address = load_inventory(it.site / "hosts.yml").nodes["node1"].mgmt_address
        assert address
        # The router's metrics listener on the management address, and Prometheus beside it,
        # bound there too (the bastion's dashboard asks it), scraping every second. Named in
        # llmgw.yaml before apply, so the router's own dashboard (its site copy) knows it too.
        prometheus = f"http://{address}:{PROM_PORT}"
        node1 = {"llmgw_router_metrics_listen": f"{address}:{METRICS_PORT}",
                 "llmgw_router_workers": 1}  # one process: what this test checks is not the workers' merge
        group = {"hosts": {"node1": None}, "vars": {
            "llmgw_prometheus_listen": f"{address}:{PROM_PORT}", "llmgw_prometheus_scrape_interval": "1s",
            "llmgw_prometheus_scrape_timeout": "1s"}}
        shape(it, host_vars={"node1": node1}, groups={"llmgw_prometheus": group}, config=f"prometheus: {prometheus}")
        assert Site.load(it.site).config.prometheus == prometheus
        it.ok("apply", "--auto-approve")
        run = run_playbook(ansible_content.playbook("prometheus.yml"), it.site / "hosts.yml", timeout=900)
        assert run.ok, f"playbooks/prometheus.yml failed on {run.failed or run.unreachable}"
        try:
            yield Metered(it, prometheus, f"http://{address}:{METRICS_PORT}")
        finally:
            HTTP.close()  # its kept-alive connections, else unclosed sockets warn (an error here) at exit


def instant(prometheus: str, expr: str) -> list[dict[str, Any]]:
    r = HTTP.get(prometheus + "/api/v1/query", params={"query": expr})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, r.status_code, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def has_data(prometheus: str, expr: str, since: float) -> bool:
    """Does `expr` give a number (not NaN) at some moment since `since`? An error fails the test."""
    r = HTTP.get(prometheus + "/api/v1/query_range",
                 params={"query": expr, "start": f"{since:.3f}", "end": f"{time.time():.3f}", "step": "1"})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, r.status_code, body)
    return any(math.isfinite(float(v)) for series in body["data"]["result"] for _t, v in series["values"])


def send_requests(m: Metered) -> None:
    key = hosts_for(Site.load(m.lab.site)).create_key("metrics")["key"]
    api = openai.OpenAI(base_url=m.lab.router_url + "/v1", api_key=key, max_retries=0, timeout=120)
    try:
        for i in range(STREAMS):
            if i == 1:  # a series first scraped with its count in it has no rate: let Prometheus see one.
                # Both histograms of a stream: TTFT is observed at its first event, the inter-token
                # latency at its end, so a scrape between them has the one and not the other (and
                # under load, with scrapes missed, the others may all end before the next one).
                for series in ("llmgw_time_to_first_token_seconds_count", "llmgw_inter_token_latency_seconds_count"):
                    wait_until(lambda series=series: instant(m.prometheus, series), 60,
                               f"the first stream's {series} in Prometheus")
            chunks = list(api.chat.completions.create(model="tiny", max_tokens=16, stream=True,
                                                      messages=[{"role": "user", "content": "hello"}]))
            assert chunks
        for _ in range(PLAIN):
            reply = api.chat.completions.create(model="tiny", max_tokens=8,
                                                messages=[{"role": "user", "content": "hi"}])
            assert reply.usage is not None and reply.usage.completion_tokens == 8
        for i in range(MISSING):
            if i == 1:  # the same for the 404 series, which the first unknown model creates
                wait_until(lambda: instant(m.prometheus, 'llmgw_requests_total{status="404"}'), 60,
                           "the first 404 in Prometheus")
            with pytest.raises(openai.NotFoundError):
                api.chat.completions.create(model="no-such-model", max_tokens=2,
                                            messages=[{"role": "user", "content": "hi"}])
    finally:
        api.close()


def on_node1(the_lab: Lab, command: str) -> str:
    """What `command` prints on the lab host node1 (over SSH, as Ansible reaches it)."""
    done = the_lab.ansible("node1", "-m", "ansible.builtin.shell", "-a", command)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out: str = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["node1"]["stdout"]
    return out


def grafana_queries() -> list[tuple[str, str]]:
    doc = json.loads(GRAFANA.read_text())
    return [(f"{p['title']} / {t['refId']}", t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]


def not_known_in_the_lab(expr: str) -> bool:
    """The fleet row's GPU and fabric queries: the lab's containers have no NVIDIA GPU and no
    InfiniBand, so those gauges are not known there, and must be absent (never zero)."""
    return "llmgw_fleet_gpu" in expr or "llmgw_fabric_" in expr


def as_promql(expr: str) -> str:
    """A Grafana query as Prometheus gets it: every model, a rate window of many scrapes."""
    out = expr.replace("$__rate_interval", "30s").replace('"$model"', '".*"')
    assert "$" not in out, f"a Grafana variable this test does not know: {out}"
    return out


@pytest.fixture(scope="module")
def dashboard(metered: Metered) -> Iterator[str]:
    """The dashboard on the bastion side, over the lab site (its llmgw.yaml names Prometheus)."""
    app = FastAPI()
    app.include_router(dashboard_router(DashboardSources(site=SiteDataCache(metered.lab.site),
                                                         runtime=handed_in(Runtime.unknown("not asked here")))))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "the dashboard's uvicorn")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def test_prometheus_history_on_the_dashboard_and_every_grafana_query(metered: Metered, dashboard: str) -> None:
    prom = metered.prometheus
    # The role's scrape config: the router and the engines it relays, both up. A Prometheus
    # just started lists no target until its discovery has run: wait for the list.
    def targets() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = HTTP.get(prom + "/api/v1/targets").json()["data"]["activeTargets"]
        return found

    wait_until(lambda: len(targets()) >= 2, 60, "Prometheus to list its scrape targets")
    assert {t["labels"]["job"] for t in targets()} == {"llmgw-router", "llmgw-engines"}, targets()
    wait_until(lambda: all(t["health"] == "up" for t in targets()), 60, "both scrape jobs up")
    # Prometheus listens on the management address only (the role binds it where told).
    loopback = on_node1(metered.lab, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{PROM_PORT}/-/ready"
                                     " || true")
    assert loopback == "000", loopback

    started, since = time.monotonic(), time.time() - 5
    send_requests(metered)

    def scraped() -> bool:
        rows = instant(prom, 'sum(llmgw_requests_total{model="tiny",status="200"})')
        return bool(rows) and float(rows[0]["value"][1]) >= STREAMS + PLAIN

    wait_until(scraped, 60, "Prometheus to scrape the requests sent")
    # The fleet gauges apply shipped in the router's site copy (fleet.json), as the lab's facts say.
    facts = json.loads((metered.lab.site / "facts" / "node1.json").read_text())
    for fs in facts["filesystems"]:
        rows = instant(prom, f'llmgw_node_filesystem_size_bytes{{node="node1",mount="{fs["mount"]}"}}')
        assert [float(r["value"][1]) for r in rows] == [fs["total_bytes"]], (fs, rows)
    rows = instant(prom, 'llmgw_replicas{model="tiny",state="ready"}')
    assert [float(r["value"][1]) for r in rows] == [1.0], rows
    assert instant(prom, "llmgw_node_facts_timestamp_seconds"), "no fleet gauges scraped"
    # Every Grafana query has data (rates need two scrapes after the change: wait for it), but
    # the fleet's GPUs and fabrics, which the lab has not: those give no series at all.
    queries = grafana_queries()
    assert len(queries) >= 15 + 8
    absent = [(name, expr) for name, expr in queries if not_known_in_the_lab(expr)]
    assert len(absent) == 5, absent
    for name, expr in absent:
        assert not has_data(prom, as_promql(expr), since), f"{name}: data for what the lab does not have"
    queries = [(name, expr) for name, expr in queries if not not_known_in_the_lab(expr)]
    empty: list[str] = []

    def all_have_data() -> bool:
        empty.clear()
        empty.extend(name for name, expr in queries if not has_data(prom, as_promql(expr), since))
        return not empty

    try:
        wait_until(all_have_data, 60, "every Grafana query to return data")
    except AssertionError:
        raise AssertionError(f"Grafana queries without data: {empty}") from None
    doc = json.loads(GRAFANA.read_text())
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["definition"])
            assert found, var["definition"]
            metric, label = found.groups()
            values = HTTP.get(f"{prom}/api/v1/label/{label}/values", params={"match[]": metric}).json()
            assert values["status"] == "success" and "tiny" in values["data"], values
    seen = time.monotonic() - started

    # The history page in Chromium: the requests sent, drawn.
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup-host (or apt-get install -y chromium)")
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(120_000)  # a loaded 2-core machine: the page asks Prometheus 7 times
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
                    if msg.type in ("error", "warning") else None)
            page.goto(dashboard + "/history", wait_until="load")
            assert page.locator('nav a[href="/history"][aria-current="page"]').count() == 1
            for chart, series in (("requests", "tiny"), ("ttft", "tiny p50"), ("ttft", "tiny p90"),
                                  ("tokens", "tiny out"), ("tokens", "tiny in"), ("errors", "- 404")):
                line = page.locator(f'#chart-{chart} polyline[data-series="{series}"]')
                assert line.count() >= 1, f"no {series!r} line on chart {chart}"
                # Drawn above the chart's zero line somewhere: the requests sent, not an empty
                # series. (Not Playwright's is_visible: a flat or one-point line has a box of
                # zero height, which it counts as hidden.)
                ys = [float(xy.split(",")[1]) for el in line.all() for xy in (el.get_attribute("points") or "").split()]
                assert any(y < HEIGHT - BOTTOM - 0.05 for y in ys), (chart, series, ys)
                points = page.locator(f'#chart-{chart} .legend [data-series="{series}"]').get_attribute("data-points")
                assert points is not None and int(points) >= 1, (chart, series, points)
            assert page.locator(".chart [role=alert]").count() == 0
            shots = REPO / "artifacts" / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "history.png"), full_page=True)
            page.click('a[href="/history?window=1d"]')
            page.wait_for_url("**/history?window=1d")
            assert page.locator('#chart-requests polyline[data-series="tiny"]').count() >= 1
        finally:
            browser.close()
    assert not problems, problems
    # The router's own dashboard (admin listener, loopback on its host) asks the same Prometheus.
    on_router = on_node1(metered.lab, "curl -sf http://127.0.0.1:8001/history")
    assert 'data-series="tiny"' in on_router and "no-prometheus" not in on_router, on_router[-3000:]
    print("metrics e2e:", {"requests": STREAMS + PLAIN + MISSING, "grafana_queries": len(queries),
                           "seconds_until_all_in_prometheus": round(seen, 1)})
