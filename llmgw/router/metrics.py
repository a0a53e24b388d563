"""Prometheus metrics, counted in plain Python on the hot path and rendered at scrape time.

prometheus-client's own Counter and Histogram take a lock and walk label dicts on
every update; at a few updates per request that was a measurable part of the
router's cost. Here a request only adds to ints in dicts owned by the event loop, and
a collector turns them into metric families when /metrics is scraped (on the same
loop, so it sees a consistent snapshot). Replica gauges (in flight, health, state)
are read from the routing table at scrape time too.

Model labels only take names from the state (an unknown name counts as "-"), so
clients cannot grow the label set.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.router.table import RoutingTable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Hist:
    """Bucket counts (not cumulative) plus the sum; the +Inf bucket is the last one."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(BUCKETS, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*(repr(b) for b in BUCKETS), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class RouterMetrics(Collector):
    def __init__(self, table: Callable[[], RoutingTable]) -> None:
        self.table = table
        self.requests: dict[tuple[str, int], int] = {}
        self.latency: dict[str, Hist] = {}
        self.ttft: dict[str, Hist] = {}
        self.tokens: dict[tuple[str, str], int] = {}
        self.upstream_errors: dict[tuple[str, str], int] = {}
        self.rejected: dict[str, int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- the hot path --------------------------------------------------------------------
    def request_done(self, model: str, status: int, seconds: float) -> None:
        key = (model, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        h = self.latency.get(model)
        if h is None:
            h = self.latency[model] = Hist()
        h.observe(seconds)

    def first_byte(self, model: str, seconds: float) -> None:
        h = self.ttft.get(model)
        if h is None:
            h = self.ttft[model] = Hist()
        h.observe(seconds)

    def tokens_used(self, model: str, prompt: int, completion: int) -> None:
        for kind, n in (("prompt", prompt), ("completion", completion)):
            if n:
                self.tokens[(model, kind)] = self.tokens.get((model, kind), 0) + n

    def upstream_error(self, replica: str, kind: str) -> None:
        self.upstream_errors[(replica, kind)] = self.upstream_errors.get((replica, kind), 0) + 1

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    # -- scrape time ---------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("llmgw_requests", "Client requests by model and HTTP status",
                                labels=["model", "status"])
        for (model, status), n in sorted(self.requests.items()):
            c.add_metric([model, str(status)], n)
        yield c
        for name, doc, hists in (
                ("llmgw_request_duration_seconds", "Time from request to the end of the response", self.latency),
                ("llmgw_time_to_first_token_seconds", "Time from request to the first response byte from the "
                                                      "engine", self.ttft)):
            h = HistogramMetricFamily(name, doc, labels=["model"])
            for model, hist in sorted(hists.items()):
                h.add_metric([model], hist.cumulative(), hist.sum)
            yield h
        t = CounterMetricFamily("llmgw_tokens", "Tokens reported by the engines", labels=["model", "kind"])
        for (model, kind), n in sorted(self.tokens.items()):
            t.add_metric([model, kind], n)
        yield t
        u = CounterMetricFamily("llmgw_upstream_errors", "Failed upstream attempts", labels=["replica", "kind"])
        for (replica, kind), n in sorted(self.upstream_errors.items()):
            u.add_metric([replica, kind], n)
        yield u
        r = CounterMetricFamily("llmgw_rejected_requests", "Requests refused before routing", labels=["reason"])
        for reason, n in sorted(self.rejected.items()):
            r.add_metric([reason], n)
        yield r
        yield from self._replicas()

    def _replicas(self) -> Iterator[Metric]:
        t = self.table()
        in_flight = GaugeMetricFamily("llmgw_replica_in_flight", "Requests in flight per replica",
                                      labels=["replica", "model"])
        healthy = GaugeMetricFamily("llmgw_replica_healthy", "1 when the replica passes health checks, 0 when "
                                    "not, -1 when not checked yet", labels=["replica", "model"])
        state = GaugeMetricFamily("llmgw_replica_state", "Replica state from the state file (1 = current)",
                                  labels=["replica", "model", "state"])
        for rep in t.replicas.values():
            in_flight.add_metric([rep.id, rep.model], rep.in_flight)
            healthy.add_metric([rep.id, rep.model], {"healthy": 1, "unhealthy": 0}.get(rep.health, -1))
            state.add_metric([rep.id, rep.model, rep.state], 1)
        serial = GaugeMetricFamily("llmgw_state_serial", "Serial of the state the router routes by")
        serial.add_metric([], t.serial)
        yield from (in_flight, healthy, state, serial)

    def render(self) -> bytes:
        return generate_latest(self.registry)
