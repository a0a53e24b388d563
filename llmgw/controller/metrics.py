"""The controller's Prometheus metrics: what its demand loop did (docs/demand.md).

Served as `GET /metrics` on the controller's admin API (loopback by default, like every
endpoint there; docs/demand.md says why), not on the routers' demand listener:

    llmgw_activations_total{model,outcome}                    on-demand starts of a model with
                                                              no replica: started | failed |
                                                              refused (cannot be placed, or no
                                                              such model) | deferred (the state's
                                                              lock was held: tried again)
    llmgw_scale_decisions_total{model,direction,reason,outcome}
                                                              every action the scaler carried out:
                                                              direction up | down; reason demand
                                                              (activation) | load | idle; outcome
                                                              applied | failed | refused | deferred
    llmgw_activations_in_flight{model}                        activations pending or starting now

The router counts neither: it never decides (it asks the controller), and the controller
is the one place both happen. Labels are bounded: a model is a catalog model's name or
"-", the rest are this module's words.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNKNOWN = "-"
ACTIVATION_OUTCOMES = ("started", "failed", "refused", "deferred")
# A scaler Decision's kind -> (direction, reason)
KINDS = {"activate": ("up", "demand"), "scale-up": ("up", "load"), "scale-down": ("down", "load"),
         "stop-idle": ("down", "idle")}
DECISION_OUTCOMES = ("applied", "failed", "refused", "deferred")


class ControllerMetrics(Collector):
    """Counts from the controller's loop thread, rendered from the API's (hence the lock)."""

    def __init__(self, in_flight: Callable[[], Iterable[str]] = tuple) -> None:
        self.in_flight = in_flight  # models with an activation pending or starting
        self.models: frozenset[str] = frozenset()  # the catalog's, as of the last tick
        self._lock = threading.Lock()
        self._activations: dict[tuple[str, str], int] = {}
        self._decisions: dict[tuple[str, str, str, str], int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def _model(self, model: str) -> str:
        return model if model in self.models else UNKNOWN

    def activation(self, model: str, outcome: str) -> None:
        assert outcome in ACTIVATION_OUTCOMES, outcome
        key = (self._model(model), outcome)
        with self._lock:
            self._activations[key] = self._activations.get(key, 0) + 1

    def decision(self, model: str, kind: str, outcome: str) -> None:
        """A scaler action of `kind` (a Decision's) on `model` ended with `outcome`."""
        assert outcome in DECISION_OUTCOMES, outcome
        direction, reason = KINDS[kind]
        key = (self._model(model), direction, reason, outcome)
        with self._lock:
            self._decisions[key] = self._decisions.get(key, 0) + 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            activations, decisions = dict(self._activations), dict(self._decisions)
        a = CounterMetricFamily("llmgw_activations", "On-demand starts of a model with no replica, by outcome",
                                labels=["model", "outcome"])
        for key, n in sorted(activations.items()):
            a.add_metric(list(key), n)
        yield a
        d = CounterMetricFamily("llmgw_scale_decisions", "Scale actions the controller carried out, by direction, "
                                "reason and outcome", labels=["model", "direction", "reason", "outcome"])
        for dkey, n in sorted(decisions.items()):
            d.add_metric(list(dkey), n)
        yield d
        g = GaugeMetricFamily("llmgw_activations_in_flight", "Activations pending or starting", labels=["model"])
        counts: dict[str, int] = {m: 0 for m in self.models}
        for m in self.in_flight():
            counts[self._model(m)] = counts.get(self._model(m), 0) + 1
        for model, n in sorted(counts.items()):
            g.add_metric([model], n)
        yield g

    def render(self) -> bytes:
        return generate_latest(self.registry)
