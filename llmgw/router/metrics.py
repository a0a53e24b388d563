"""Prometheus metrics, counted in plain Python on the hot path and rendered at scrape time.

prometheus-client's own Counter and Histogram take a lock and walk label dicts on
every update; at a few updates per request that was a measurable part of the
router's cost. Here a request only adds to ints in dicts owned by the event loop, and
a collector turns them into metric families when /metrics is scraped (on the same
loop, so it sees a consistent snapshot). Replica gauges (in flight, health, state)
are read from the routing table at scrape time too.

What is counted (names as exposed; `rate()` of a counter is per second):

    llmgw_requests_total{model,status}                     client requests, by the status sent
    llmgw_request_duration_seconds{model}                  request to the end of the response
    llmgw_queue_wait_seconds{model}                        request to its first upstream attempt
                                                           (body, quota, on-demand start)
    llmgw_replica_responses_total{model,replica,status}    responses relayed from each replica
    llmgw_time_to_first_token_seconds{model,replica}       streams: request to the first event
    llmgw_inter_token_latency_seconds{model,replica}       streams: first to last event over
                                                           completion tokens - 1
    llmgw_tokens_total{model,replica,kind}                 kind = prompt (in) | completion (out)
    llmgw_upstream_errors_total{model,replica,kind}        failed attempts (connect, status, ...)
    llmgw_rejected_requests_total{reason}                  refused before routing
    llmgw_adapter_loads_total{adapter,event}               adapters loaded at run time (lora.py):
                                                           load | unload | load_failure | unload_failure
    llmgw_replica_in_flight / _healthy / _state, llmgw_state_serial   gauges from the table

Activations and scale decisions are the controller's (llmgw.controller.metrics): a router
never decides either, it asks the controller.

Labels are bounded: models and replicas only take names from the state (anything else
counts as "-"), statuses are integers, kinds and reasons are the callers' constants.
No label ever holds an API key, a key id or a tenant name.

For the multi-process router: every counter is a `dict[label tuple, int]` and every
histogram a `dict[label tuple, Hist]`, named in COUNTERS and HISTOGRAMS; `snapshot()`
turns them into JSON-able lists and `absorb()` adds another process's snapshot, so a
merge across workers needs nothing metric-specific.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.router import admission_metrics
from llmgw.router.routes import RouteRuntime
from llmgw.router.table import RoutingTable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Inter-token latency: milliseconds on a GPU, tens of them on a CPU.
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
UNKNOWN = "-"
# The kinds of failed attempt proxy.py counts: shown as 0 for every replica before the first
# one, so a rate() over them has a series to work on (Prometheus' advice: initialise).
UPSTREAM_KINDS = ("connect", "status", "first_byte_timeout", "mid_response", "stale_connection")


class Hist:
    """Bucket counts (not cumulative) plus the sum; the +Inf bucket is the last one."""

    __slots__ = ("buckets", "counts", "sum")

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*(repr(b) for b in self.buckets), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


# name -> (help, label names) of every counter, and of every histogram with its buckets
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "requests": ("Client requests by model and HTTP status", ("model", "status")),
    "replica_responses": ("Responses relayed from each replica, by the engine's HTTP status",
                          ("model", "replica", "status")),
    "tokens": ("Tokens reported by the engines: prompt (in) and completion (out)", ("model", "replica", "kind")),
    "upstream_errors": ("Failed upstream attempts", ("model", "replica", "kind")),
    "rejected_requests": ("Requests refused before routing", ("reason",)),
}
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "request_duration_seconds": ("Time from request to the end of the response", ("model",), BUCKETS),
    "queue_wait_seconds": ("Time from request to its first upstream attempt (body read, quota, on-demand "
                           "start)", ("model",), BUCKETS),
    "time_to_first_token_seconds": ("Streams: time from request to the first event from the engine",
                                    ("model", "replica"), BUCKETS),
    "inter_token_latency_seconds": ("Streams: time from the first to the last event over completion "
                                    "tokens - 1", ("model", "replica"), ITL_BUCKETS),
}
# Admission's queue (admission_metrics.py names them and documents them).
COUNTERS.update(admission_metrics.COUNTERS)
HISTOGRAMS.update(admission_metrics.HISTOGRAMS)

# Weighted routes (routes.py, docs/routes.md): per route and target, both names from the state.
COUNTERS.update({
    "route_requests": ("Attempts on each target of a weighted route, by the engine's HTTP status (failed: no "
                       "answer)", ("route", "target", "status")),
    "route_errors": ("Failed attempts on each target of a weighted route (an engine 5xx, or no answer)",
                     ("route", "target")),
    # `generation`: which version of the route (its split and its targets' replicas) the trip was in,
    # so the /metrics of a router with several workers knows which canaries any of them tripped now.
    "route_guard_trips": ("Canaries whose route guard tripped, sending their share to the stable target",
                          ("route", "target", "generation")),
})
# LoRA adapters loaded at run time (lora.py): per adapter, a name from the state.
# event = load | unload | load_failure | unload_failure.
COUNTERS.update({
    "adapter_loads": ("Adapters loaded and unloaded at run time by the router, and the calls that failed",
                      ("adapter", "event")),
})
HISTOGRAMS.update({
    "route_time_to_first_token_seconds": ("Streams: time from request to the first event, per route target",
                                          ("route", "target"), BUCKETS),
    "route_inter_token_latency_seconds": ("Streams: first to last event over completion tokens - 1, per route "
                                          "target", ("route", "target"), ITL_BUCKETS),
})


class RouterMetrics(Collector):
    def __init__(self, table: Callable[[], RoutingTable]) -> None:
        self.table = table
        self.counters: dict[str, dict[tuple[str, ...], int]] = {name: {} for name in COUNTERS}
        self.histograms: dict[str, dict[tuple[str, ...], Hist]] = {name: {} for name in HISTOGRAMS}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- label bounding ------------------------------------------------------------------
    def _model(self, model: str) -> str:
        table = self.table()  # a LoRA adapter is labelled as itself: its requests are its own
        return model if model in table.models or model in table.adapters else UNKNOWN

    def _replica(self, replica: str) -> tuple[str, str]:
        """(model, replica) of a replica of the state, else ("-", "-")."""
        rep = self.table().replicas.get(replica)
        return (rep.model, rep.id) if rep is not None else (UNKNOWN, UNKNOWN)

    def _count(self, name: str, key: tuple[str, ...], n: int = 1) -> None:
        c = self.counters[name]
        c[key] = c.get(key, 0) + n

    def _observe(self, name: str, key: tuple[str, ...], value: float) -> None:
        hists = self.histograms[name]
        h = hists.get(key)
        if h is None:
            h = hists[key] = Hist(HISTOGRAMS[name][2])
        h.observe(value)

    # -- the hot path --------------------------------------------------------------------
    def request_done(self, model: str, status: int, seconds: float) -> None:
        """A client request ended; `model` is the resolved name, or "-" when none was found."""
        model = self._model(model)
        self._count("requests", (model, str(status)))
        self._observe("request_duration_seconds", (model,), seconds)

    def queue_wait(self, model: str, seconds: float) -> None:
        self._observe("queue_wait_seconds", (self._model(model),), seconds)

    def replica_done(self, replica: str, status: int) -> None:
        self._count("replica_responses", (*self._replica(replica), str(status)))

    def first_token(self, replica: str, seconds: float) -> None:
        self._observe("time_to_first_token_seconds", self._replica(replica), seconds)

    def stream_done(self, replica: str, first_to_last: float, completion: int) -> None:
        """A stream ended with `completion` tokens; its events spanned `first_to_last` seconds."""
        if completion > 1:
            self._observe("inter_token_latency_seconds", self._replica(replica), first_to_last / (completion - 1))

    def tokens_used(self, replica: str, prompt: int, completion: int) -> None:
        model, rid = self._replica(replica)
        for kind, n in (("prompt", prompt), ("completion", completion)):
            if n:
                self._count("tokens", (model, rid, kind), n)

    def upstream_error(self, replica: str, kind: str) -> None:
        self._count("upstream_errors", (*self._replica(replica), kind))

    def adapter_event(self, adapter: str, event: str) -> None:
        """A run-time load or unload of an adapter (lora.py), or one that failed."""
        self._count("adapter_loads", (adapter if adapter in self.table().adapters else UNKNOWN, event))

    def reject(self, reason: str) -> None:
        self._count("rejected_requests", (reason,))

    # -- weighted routes (routes.py) -----------------------------------------------------
    def _route(self, route: str, target: str) -> tuple[str, str]:
        entry = self.table().models.get(route)
        if entry is None or entry.route is None:
            return UNKNOWN, UNKNOWN
        return route, target if target in entry.route.stats else UNKNOWN

    def tripped_targets(self, route: RouteRuntime) -> set[str]:
        """The targets of `route` tripped in this process or in any worker whose counts were absorbed."""
        trips = self.counters["route_guard_trips"]
        return set(route.tripped) | {t for t in route.targets if trips.get((route.name, t, route.generation))}

    def route_attempt(self, route: str, target: str, status: str) -> None:
        """An attempt on a route's target ended: `status` is the engine's, or "failed" (no answer)."""
        key = self._route(route, target)
        self._count("route_requests", (*key, status))
        if status == "failed" or status.startswith("5"):
            self._count("route_errors", key)

    def route_first_token(self, route: str, target: str, seconds: float) -> None:
        self._observe("route_time_to_first_token_seconds", self._route(route, target), seconds)

    def route_stream_done(self, route: str, target: str, first_to_last: float, completion: int) -> None:
        if completion > 1:
            self._observe("route_inter_token_latency_seconds", self._route(route, target),
                          first_to_last / (completion - 1))

    def route_tripped(self, route: str, target: str) -> None:
        entry = self.table().models.get(route)
        generation = entry.route.generation if entry is not None and entry.route is not None else UNKNOWN
        self._count("route_guard_trips", (*self._route(route, target), generation))

    # -- across processes ----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Counters and histograms as JSON-able lists (another process `absorb`s them)."""
        return {"counters": {name: [[list(k), n] for k, n in c.items()] for name, c in self.counters.items()},
                "histograms": {name: [[list(k), h.counts, h.sum] for k, h in hs.items()]
                               for name, hs in self.histograms.items()}}

    def absorb(self, snap: dict[str, Any]) -> None:
        """Add another process's `snapshot()` to these counts (names this version does not know
        are skipped; a histogram with other buckets is skipped whole)."""
        for name, rows in snap.get("counters", {}).items():
            if name in self.counters:
                for key, n in rows:
                    self._count(name, tuple(key), int(n))
        for name, rows in snap.get("histograms", {}).items():
            if name not in self.histograms:
                continue
            hists = self.histograms[name]
            for key, counts, total in rows:
                h = hists.get(tuple(key))
                if h is None:
                    h = Hist(HISTOGRAMS[name][2])
                if len(counts) != len(h.counts):
                    continue
                hists[tuple(key)] = h
                h.counts = [a + int(b) for a, b in zip(h.counts, counts, strict=True)]
                h.sum += float(total)

    # -- scrape time ---------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        for name, (doc, labels) in COUNTERS.items():
            c = CounterMetricFamily(f"llmgw_{name}", doc, labels=list(labels))
            values = self.counters[name]
            if name == "upstream_errors":
                values = {**{(r.model, r.id, kind): 0 for r in self.table().replicas.values()
                             for kind in UPSTREAM_KINDS}, **values}
            for key, n in sorted(values.items()):
                c.add_metric(list(key), n)
            yield c
        for name, (doc, labels, _buckets) in HISTOGRAMS.items():
            h = HistogramMetricFamily(f"llmgw_{name}", doc, labels=list(labels))
            for key, hist in sorted(self.histograms[name].items()):
                h.add_metric(list(key), hist.cumulative(), hist.sum)
            yield h
        yield from self._replicas()
        queued = GaugeMetricFamily(*admission_metrics.QUEUE_LENGTH, labels=["model", "group", "priority"])
        for key, n in sorted(admission_metrics.queue_lengths(self.counters).items()):
            queued.add_metric(list(key), max(n, 0))
        yield queued
        yield from self._routes()

    def _routes(self) -> Iterator[Metric]:
        """Each route's split in force (a tripped canary's share is on the stable target)."""
        share = GaugeMetricFamily("llmgw_route_share_percent", "The share of a weighted route's new requests "
                                  "each target gets now, in percent", labels=["route", "target"])
        tripped = GaugeMetricFamily("llmgw_route_guard_tripped", "1 when the target broke its route's guard "
                                    "and lost its share until the route changes", labels=["route", "target"])
        for entry in self.table().models.values():
            if entry.route is not None:
                out = self.tripped_targets(entry.route)
                for target, pct in entry.route.shares(out):
                    share.add_metric([entry.name, target], pct)
                    tripped.add_metric([entry.name, target], 1 if target in out else 0)
        yield from (share, tripped)

    def _replicas(self) -> Iterator[Metric]:
        t = self.table()
        in_flight = GaugeMetricFamily("llmgw_replica_in_flight", "Requests in flight per replica",
                                      labels=["replica", "model"])
        healthy = GaugeMetricFamily("llmgw_replica_healthy", "1 when the replica passes health checks (or is "
                                    "busy), 0 when not, -1 when not checked yet", labels=["replica", "model"])
        state = GaugeMetricFamily("llmgw_replica_state", "Replica state from the state file (1 = current)",
                                  labels=["replica", "model", "state"])
        for rep in t.replicas.values():
            in_flight.add_metric([rep.id, rep.model], rep.in_flight)
            healthy.add_metric([rep.id, rep.model], {"healthy": 1, "busy": 1, "unhealthy": 0}.get(rep.health, -1))
            state.add_metric([rep.id, rep.model, rep.state], 1)
        serial = GaugeMetricFamily("llmgw_state_serial", "Serial of the state the router routes by")
        serial.add_metric([], t.serial)
        yield from (in_flight, healthy, state, serial)

    def render(self) -> bytes:
        return generate_latest(self.registry)
