"""The dashboard's history page: request rate, time to first token, tokens/s and errors per
model over the last hour or day, from the Prometheus named by `prometheus:` in llmgw.yaml.

The router keeps no history; Prometheus scrapes the routers' /metrics (and the engines'
own, relayed at /metrics/engines; roles/llmgw_prometheus) and this page asks its HTTP API
(`/api/v1/query_range`) for the series, then draws them as inline SVG on the server: no
JavaScript, like the rest of the dashboard.

The URL comes from a file someone edited, and the answers from a server on the network:
both are hostile. The URL is checked when the site loads (llmgw.site), the request never
follows a redirect, ignores proxy settings from the environment, has a deadline and a
size limit, and an answer is used only when it is the documented JSON shape. Series and
points are bounded. Label values reach the page through Jinja's autoescaping only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment

from llmgw.errors import LlmgwError
from llmgw.site import Site
from llmgw.views import SiteDataCache

# window -> (seconds shown, step between points)
WINDOWS: dict[str, tuple[int, int]] = {"1h": (3600, 30), "1d": (86400, 720)}
TIMEOUT = 5.0
MAX_BYTES = 8 * 2**20
MAX_SERIES = 24  # per chart: the rest are named as left out
PALETTE = ("#2b6cb0", "#dd6b20", "#2f855a", "#9f7aea", "#c53030", "#319795", "#b7791f", "#d53f8c", "#4a5568",
           "#38a169")
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 640, 200, 56, 22, 8


@dataclass(frozen=True)
class Query:
    expr: str  # `{w}` is replaced by the rate window
    label: str  # the series name: `{model}` and other labels of the result
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    unit: str
    queries: tuple[Query, ...]
    note: str = ""


# Every query here sums over routers (instance) and replicas: one line per model.
PANELS: tuple[Panel, ...] = (
    Panel("requests", "Requests", "req/s",
          (Query('sum by (model) (rate(llmgw_requests_total{{model!="-"}}[{w}]))', "{model}"),)),
    Panel("ttft", "Time to first token (streams)", "s",
          (Query("histogram_quantile(0.5, sum by (model, le) (rate(llmgw_time_to_first_token_seconds_bucket[{w}])))",
                 "{model} p50"),
           Query("histogram_quantile(0.9, sum by (model, le) (rate(llmgw_time_to_first_token_seconds_bucket[{w}])))",
                 "{model} p90", dashed=True))),
    Panel("tokens", "Tokens", "tokens/s",
          (Query('sum by (model) (rate(llmgw_tokens_total{{kind="completion"}}[{w}]))', "{model} out"),
           Query('sum by (model) (rate(llmgw_tokens_total{{kind="prompt"}}[{w}]))', "{model} in", dashed=True))),
    Panel("errors", "Errors", "req/s",
          (Query('sum by (model, status) (rate(llmgw_requests_total{{status=~"[45].."}}[{w}]))',
                 "{model} {status}"),),
          note="answers with a 4xx or 5xx status; model \u201c-\u201d: the request named no known model"),
)


class PrometheusError(LlmgwError):
    """Prometheus did not answer, or answered something else than its API's JSON."""


@dataclass
class Line:
    name: str
    color: str
    dashed: bool
    paths: list[str]  # SVG polyline point lists, one per run of points without a gap
    points: int
    last: float | None
    peak: float


@dataclass
class Chart:
    panel: Panel
    lines: list[Line] = field(default_factory=list)
    left_out: int = 0
    error: str | None = None
    ymax: float = 0.0
    yticks: list[tuple[float, str]] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)


def rate_window(step: int) -> str:
    """At least a minute, and two steps, so every point of the chart sees several scrapes."""
    return f"{max(60, 2 * step)}s"


def parse_matrix(payload: Any) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """The series of a query_range answer, or PrometheusError when it is not that shape."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise PrometheusError(f"the query failed: {str(error)[:300]}" if error else "not a Prometheus API answer")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PrometheusError("the answer is not a range of series (resultType matrix)")
    out: list[tuple[dict[str, str], list[tuple[float, float]]]] = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) \
                or not isinstance(item.get("values"), list):
            raise PrometheusError("a series in the answer is not {metric, values}")
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        values: list[tuple[float, float]] = []
        for pair in item["values"]:
            try:
                ts, value = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError, KeyError):
                raise PrometheusError("a point in the answer is not [time, value]") from None
            values.append((ts, value))
        out.append((labels, values))
    return out


class Prometheus:
    """The HTTP API of one Prometheus at `base` (already checked by llmgw.site)."""

    def __init__(self, base: str, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base = base.rstrip("/")
        self.transport = transport

    async def query_range(self, client: httpx.AsyncClient, expr: str, start: float, end: float,
                          step: int) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        try:
            async with client.stream("GET", self.base + "/api/v1/query_range", params=params) as resp:
                if resp.is_redirect:
                    raise PrometheusError(f"answered {resp.status_code} (a redirect, not followed)")
                body = bytearray()
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BYTES:
                        raise PrometheusError(f"answered more than {MAX_BYTES // 2**20} MiB")
                status = resp.status_code
        except httpx.HTTPError as exc:
            raise PrometheusError(f"did not answer: {type(exc).__name__}") from None
        try:
            payload = httpx.Response(200, content=bytes(body)).json()
        except ValueError:
            raise PrometheusError(f"answered {status} with something that is not JSON") from None
        if status >= 400 and not (isinstance(payload, dict) and payload.get("status") == "error"):
            raise PrometheusError(f"answered {status}")
        return parse_matrix(payload)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT), follow_redirects=False, trust_env=False,
                                 transport=self.transport, headers={"Accept": "application/json"})


def _label(template: str, labels: dict[str, str]) -> str:
    out = template
    for key in ("model", "status"):
        out = out.replace("{" + key + "}", labels.get(key, "?"))
    return out


def _nice(peak: float) -> float:
    """A round axis top at or above `peak`."""
    if peak <= 0 or not math.isfinite(peak):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(peak))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= peak:
            return m * mag
    return 10 * mag


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def draw(panel: Panel, results: Sequence[tuple[Query, list[tuple[dict[str, str], list[tuple[float, float]]]]]],
         start: float, end: float, window: str) -> Chart:
    chart = Chart(panel)
    series = [(q, labels, values) for q, rows in results for labels, values in rows]
    series.sort(key=lambda s: (_label(s[0].label, s[1]), s[0].dashed))
    chart.left_out = max(0, len(series) - MAX_SERIES)
    series = series[:MAX_SERIES]
    finite = [v for _q, _l, values in series for _t, v in values if math.isfinite(v)]
    chart.ymax = _nice(max(finite, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    span = max(end - start, 1.0)
    colors: dict[str, str] = {}
    for q, labels, values in series:
        key = labels.get("model", "?") + ("|" + labels["status"] if "status" in labels else "")
        color = colors.setdefault(key, PALETTE[len(colors) % len(PALETTE)])
        paths: list[str] = []
        run: list[str] = []
        good = [(t, v) for t, v in values if math.isfinite(v)]
        for t, v in values:
            if not math.isfinite(v):  # NaN: a quantile with no observations in the window
                if run:
                    paths.append(" ".join(run))
                run = []
                continue
            x = LEFT + (t - start) / span * plot_w
            y = TOP + plot_h - min(v, chart.ymax) / chart.ymax * plot_h
            run.append(f"{x:.1f},{y:.1f}")
        if run:
            paths.append(" ".join(run))
        # A single point draws nothing as a polyline: repeat it so it shows as a dot.
        paths = [p if " " in p else f"{p} {p}" for p in paths]
        chart.lines.append(Line(_label(q.label, labels), color, q.dashed, paths, len(good),
                                good[-1][1] if good else None, max((v for _t, v in good), default=0.0)))
    chart.yticks = [(TOP + plot_h - f * plot_h, _fmt(f * chart.ymax)) for f in (0.0, 0.5, 1.0)]
    fmt = "%H:%M" if window == "1h" else "%d %H:%M"
    chart.xticks = [(LEFT + f * plot_w, time.strftime(fmt, time.gmtime(start + f * span)))
                    for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return chart


async def history(prom: Prometheus, window: str, now: float | None = None) -> list[Chart]:
    seconds, step = WINDOWS[window]
    end = math.floor((time.time() if now is None else now) / step) * step + step
    start = end - seconds
    w = rate_window(step)
    async with prom.client() as client:
        async def panel_chart(panel: Panel) -> Chart:
            try:
                results = await asyncio.gather(*(prom.query_range(client, q.expr.format(w=w), start, end, step)
                                                 for q in panel.queries))
            except PrometheusError as exc:
                return Chart(panel, error=exc.message)
            return draw(panel, list(zip(panel.queries, results, strict=True)), start, end, window)

        return list(await asyncio.gather(*(panel_chart(p) for p in PANELS)))


def history_router(site: SiteDataCache, env: Environment, transport: httpx.AsyncBaseTransport | None = None
                   ) -> APIRouter:
    """GET /history?window=1h|1d on the dashboard (dashboard.py includes it)."""
    api = APIRouter()

    @api.get("/history", response_class=HTMLResponse, include_in_schema=False)
    async def history_page(request: Request, window: str = "1h") -> HTMLResponse:
        if window not in WINDOWS:
            window = "1h"
        ctx: dict[str, Any] = {"path": request.url.path, "now": datetime.now(UTC), "title": "History",
                               "window": window, "windows": list(WINDOWS), "charts": [], "prometheus": None,
                               "error": None, "width": WIDTH, "height": HEIGHT, "left": LEFT,
                               "plot_bottom": HEIGHT - BOTTOM, "top": TOP}
        try:
            loaded = await asyncio.to_thread(Site.load, site.root)
        except LlmgwError as exc:
            ctx["error"] = exc.message
        else:
            url = loaded.config.prometheus
            ctx["prometheus"] = url
            if url is not None:
                ctx["charts"] = await history(Prometheus(url, transport), window)
        return HTMLResponse(env.get_template("history.html").render(**ctx))

    return api
