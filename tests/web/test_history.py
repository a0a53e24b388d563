"""The history page's handling of what it does not control: the configured URL (checked when
the site loads) and the answers (a mock transport stands in for Prometheus here; the lab
e2e test, tests/e2e/test_metrics_lab.py, runs the real one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from llmgw.errors import SiteError
from llmgw.site import SITE_FILE, Site
from llmgw.views import SiteDataCache
from llmgw.web.dashboard import _env
from llmgw.web.history import PANELS, history_router


def _site(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / SITE_FILE).write_text("catalog: catalog\n" + extra)
    return tmp_path


def _page(root: Path, handler: Any, window: str = "1h") -> str:
    app = FastAPI()
    app.include_router(history_router(SiteDataCache(root), _env(), transport=httpx.MockTransport(handler)))
    with TestClient(app) as client:
        r = client.get("/history", params={"window": window})
    assert r.status_code == 200
    return r.text


def _matrix(series: list[tuple[dict[str, str], list[tuple[float, str]]]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": m, "values": [[t, v] for t, v in values]} for m, values in series]}}


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://user:pw@prom:9090", "http://prom:9090/?x=1",
                                 "http://prom:9090/#top", "gopher://prom", "http://prom :9090", "http:///x"])
def test_a_url_that_is_not_plain_http_is_refused_at_its_line(tmp_path: Path, url: str) -> None:
    root = _site(tmp_path, f"prometheus: {json.dumps(url)}\n")
    with pytest.raises(SiteError) as info:
        Site.load(root)
    assert f"{SITE_FILE}:2: prometheus:" in info.value.message and "not a Prometheus URL" in info.value.message


def test_no_prometheus_configured_says_so(tmp_path: Path) -> None:
    text = _page(_site(tmp_path), lambda req: pytest.fail("nothing may be asked"))
    assert 'id="no-prometheus"' in text and "No Prometheus is configured" in text


def test_series_are_drawn_and_label_values_stay_text(tmp_path: Path) -> None:
    asked: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        asked.append(req)
        t0 = float(req.url.params["start"])
        nan_then_values = [(t0 + 30 * i, "NaN" if i < 3 else str(0.5 * i)) for i in range(10)]
        return httpx.Response(200, json=_matrix([({"model": "tiny"}, nan_then_values),
                                                 ({"model": "<script>x</script>", "status": "500"},
                                                  [(t0, "1")])]))

    text = _page(_site(tmp_path, "prometheus: http://127.0.0.1:9/prom/\n"), handler)
    assert len(asked) == sum(len(p.queries) for p in PANELS)
    assert all(r.url.path == "/prom/api/v1/query_range" for r in asked)
    assert 'data-series="tiny"' in text and 'data-points="7"' in text
    assert "<script>x</script>" not in text and "&lt;script&gt;x&lt;/script&gt;" in text


@pytest.mark.parametrize(("response", "says"), [
    (httpx.Response(302, headers={"Location": "http://elsewhere.example/api"}), "redirect, not followed"),
    (httpx.Response(200, content=b"<html>login</html>"), "not JSON"),
    (httpx.Response(400, json={"status": "error", "error": "parse error at char 3"}), "parse error at char 3"),
    (httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}}),
     "resultType matrix"),
    (httpx.Response(200, json=_matrix([({"model": "x"}, [(1.0, "one")])])), "not [time, value]"),
    (httpx.Response(200, content=b"[" + b"0," * (5 * 2**20) + b"0]"), "more than 8 MiB"),
])
def test_a_bad_answer_is_an_error_on_each_chart(tmp_path: Path, response: httpx.Response, says: str) -> None:
    text = _page(_site(tmp_path, "prometheus: http://127.0.0.1:9\n"), lambda req: response)
    assert text.count(says) == len(PANELS), text


def test_an_unreachable_prometheus_is_named(tmp_path: Path) -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=req)

    text = _page(_site(tmp_path, "prometheus: http://127.0.0.1:9\n"), handler, window="1d")
    assert "did not answer: ConnectError" in text and 'aria-current="true">1d<' in text
