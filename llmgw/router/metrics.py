"""Prometheus metrics: one registry per router, so two routers in a process never mix.

Per-request work is a few counter increments and two histogram observations on
children cached per model. Replica gauges (in flight, health, state) are not updated
per request at all: a collector reads them from the routing table at scrape time.
Model labels only ever take names from the state (unknown names count as "-"), so a
client cannot grow the label set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.router.table import RoutingTable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class _TableCollector(Collector):
    def __init__(self, table: Callable[[], RoutingTable]) -> None:
        self.table = table

    def collect(self) -> Iterator[Metric]:
        t = self.table()
        in_flight = GaugeMetricFamily("llmgw_replica_in_flight", "Requests in flight per replica",
                                      labels=["replica", "model"])
        healthy = GaugeMetricFamily("llmgw_replica_healthy",
                                    "1 when the replica passes health checks, 0 when not, "
                                    "-1 when not checked yet", labels=["replica", "model"])
        state = GaugeMetricFamily("llmgw_replica_state", "Replica state from the state file (1 = current)",
                                  labels=["replica", "model", "state"])
        for r in t.replicas.values():
            in_flight.add_metric([r.id, r.model], r.in_flight)
            healthy.add_metric([r.id, r.model], {"healthy": 1, "unhealthy": 0}.get(r.health, -1))
            state.add_metric([r.id, r.model, r.state], 1)
        serial = GaugeMetricFamily("llmgw_state_serial", "Serial of the state the router routes by")
        serial.add_metric([], t.serial)
        yield from (in_flight, healthy, state, serial)


class RouterMetrics:
    def __init__(self, table: Callable[[], RoutingTable]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("llmgw_requests", "Client requests by model and HTTP status",
                                ["model", "status"], registry=r)
        self.latency = Histogram("llmgw_request_duration_seconds",
                                 "Time from request to the end of the response", ["model"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("llmgw_time_to_first_token_seconds",
                              "Time from request to the first response byte from the engine", ["model"],
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("llmgw_tokens", "Tokens reported by the engines", ["model", "kind"], registry=r)
        self.upstream_errors = Counter("llmgw_upstream_errors", "Failed upstream attempts",
                                       ["replica", "kind"], registry=r)
        self.rejected = Counter("llmgw_rejected_requests", "Requests refused before routing", ["reason"],
                                registry=r)
        r.register(_TableCollector(table))
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def request_done(self, model: str, status: int, seconds: float) -> None:
        self._child(self.requests, model, str(status)).inc()
        self._child(self.latency, model).observe(seconds)

    def first_byte(self, model: str, seconds: float) -> None:
        self._child(self.ttft, model).observe(seconds)

    def tokens_used(self, model: str, prompt: int, completion: int) -> None:
        if prompt:
            self._child(self.tokens, model, "prompt").inc(prompt)
        if completion:
            self._child(self.tokens, model, "completion").inc(completion)

    def upstream_error(self, replica: str, kind: str) -> None:
        self._child(self.upstream_errors, replica, kind).inc()

    def reject(self, reason: str) -> None:
        self._child(self.rejected, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
