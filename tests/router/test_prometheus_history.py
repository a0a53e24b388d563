"""A real Prometheus (Debian's binary, on loopback) scraping a real router in front of a
keyed llama-server: every query of dashboards/llmgw.json returns data without error (the
fleet row's from the example site's summary, made as apply makes it), and the dashboard's
History page draws the requests. The lab form of this test, with the
llmgw_prometheus role, is tests/e2e/test_metrics_lab.py."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from llmgw.router.engine_keys import ENGINE_KEYS_FILE
from llmgw.site import SITE_FILE, Site
from llmgw.views import SiteDataCache
from llmgw.views.planned import site_copy_files
from llmgw.web.dashboard import _env
from llmgw.web.history import history_router
from tests.support.example_site import example_site
from tests.support.net import free_port
from tests.support.router import HTTP, REPO, RunningRouter, StateFile, model, replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.engine

PROMETHEUS = Path("/usr/bin/prometheus")
GRAFANA = REPO / "dashboards" / "llmgw.json"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """prometheus(router_host_port) -> its URL, scraping the router and its engines every second."""
    if not PROMETHEUS.exists():
        pytest.fail(f"{PROMETHEUS} is missing: run scripts/setup-host (or apt-get install -y prometheus)")
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "llmgw-router", "static_configs": [{"targets": [target]}]},
                {"job_name": "llmgw-engines", "metrics_path": "/metrics/engines",
                 "static_configs": [{"targets": [target]}]}]}))
        port = free_port()
        with (tmp_path / "prometheus.log").open("wb") as log:
            procs.append(subprocess.Popen([str(PROMETHEUS), f"--config.file={config}",
                                           f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                           f"--web.listen-address=127.0.0.1:{port}"],
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return HTTP.get(url + "/-/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 60, "Prometheus ready")
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(20)


def has_data(prom: str, expr: str, since: float) -> bool:
    r = HTTP.get(prom + "/api/v1/query_range",
                 params={"query": expr, "start": f"{since:.3f}", "end": f"{time.time():.3f}", "step": "1"})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, body)
    return any(math.isfinite(float(v)) for s in body["data"]["result"] for _t, v in s["values"])


def test_every_grafana_query_and_the_history_page_against_a_real_prometheus(
        engines: Callable[..., Any], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str, prometheus: Callable[[str], str], tmp_path: Path) -> None:
    key = "llmgw-engine-" + "p" * 40
    e = engines("tiny", extra=("--api-key", key))
    keys = state.path.with_name(ENGINE_KEYS_FILE)
    keys.write_text(json.dumps({"tiny-0": key}))
    keys.chmod(0o600)
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    # The router's site copy, with the fleet summary apply makes on the bastion (the example
    # site's: GPUs and fabrics, which the fleet row's queries need).
    copy = example_site(tmp_path / "example")
    for name, data in site_copy_files(Site.load(copy)).items():
        (copy / name).write_bytes(data)
    router = start_router(state.path, metrics=True, site_dir=copy)
    prom = prometheus(router.metrics_url.removeprefix("http://"))
    since = time.time() - 5
    client = router.client(api_key)

    def stream() -> None:
        assert list(client.chat.completions.create(model="tiny", max_tokens=16, stream=True,
                                                   messages=[{"role": "user", "content": "hello"}]))

    # A series first scraped with its count already in it has no rate: one request, seen by
    # Prometheus, then the rest, which its rates see arrive.
    stream()
    wait_until(lambda: HTTP.get(prom + "/api/v1/query", params={
        "query": "llmgw_time_to_first_token_seconds_count"}).json()["data"]["result"], 30, "the first scrape")
    for _ in range(4):
        assert list(client.chat.completions.create(model="tiny", max_tokens=16, stream=True,
                                                   messages=[{"role": "user", "content": "hello"}]))
    assert client.chat.completions.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", max_tokens=2, messages=[{"role": "user", "content": "x"}])

    doc = json.loads(GRAFANA.read_text())
    queries = [(f"{p['title']} / {t['refId']}", t["expr"].replace("$__rate_interval", "30s")
                .replace('"$model"', '".*"')) for p in doc["panels"] for t in p.get("targets", [])]  # a row has none
    assert all("$" not in q for _n, q in queries)
    empty: list[str] = []

    def all_have_data() -> bool:
        empty[:] = [name for name, q in queries if not has_data(prom, q, since)]
        return not empty

    try:
        wait_until(all_have_data, 60, "every Grafana query to return data")
    except AssertionError:
        raise AssertionError(f"Grafana queries without data: {empty}") from None

    site = tmp_path / "site"
    site.mkdir()
    (site / SITE_FILE).write_text(f"prometheus: {prom}\n")
    app = FastAPI()
    app.include_router(history_router(SiteDataCache(site), _env()))
    with TestClient(app) as tc:
        page = tc.get("/history").text
    for chart, series in (("requests", "tiny"), ("ttft", "tiny p50"), ("tokens", "tiny out"), ("errors", "- 404")):
        block = page.split(f'id="chart-{chart}"', 1)[1].split("</figure>", 1)[0]
        assert f'<polyline data-series="{series}"' in block, (chart, series, block[:2000])
    assert 'role="alert"' not in page
    print("prometheus history:", {"grafana_queries": len(queries)})
    shutil.rmtree(site)
