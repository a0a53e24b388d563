"""Fleet gauges on the router's /metrics: GPUs, memory, disk, free whole nodes, weights, replicas.

The numbers of the fleet come summarised from the bastion (llmgw.fleetfile): apply
writes `fleet.json` into the router's site copy, and this module turns it into gauges at
scrape time, re-reading it only when it changed (a stat per scrape). Replicas per model
and state come from the routing table, which the router always knows. Why the router
exports them: it is the listener Prometheus already scrapes on every router host, and
the controller is optional (docs/metrics.md).

Unknown is absent, never zero (llmgw.fleetfile says which): without a summary (no site,
none shipped yet, one that does not read) the fleet series are absent and the reason is
logged once.

    llmgw_fleet_gpus{gpu_class,state}                 GPUs: free, used, held_back, unhealthy
    llmgw_fleet_gpu_nodes{gpu_class}                  nodes with GPUs of the class
    llmgw_fleet_gpu_memory_bytes{gpu_class,kind}      GPU memory: total, used
    llmgw_node_memory_bytes{node}                     a node's memory
    llmgw_node_facts_timestamp_seconds{node}          when its facts were gathered
    llmgw_node_filesystem_free_bytes{node,mount,shared}, llmgw_node_filesystem_size_bytes{...}
    llmgw_fabric_nodes{fabric}, llmgw_fabric_free_whole_nodes{fabric}
    llmgw_fabric_weights_nodes{fabric,model}          nodes of the fabric holding the model's weights
    llmgw_replicas{model,state}                       replicas per model: starting, ready, draining
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.fleetfile import FLEET_FILE, FleetSummary, read_fleet
from llmgw.router.table import RoutingTable

log = logging.getLogger("llmgw.router")
GPU_STATES = ("free", "used", "held_back", "unhealthy")
REPLICA_STATES = ("starting", "ready", "draining")


def fleet_families(summary: FleetSummary) -> list[Metric]:
    """The summary's gauges, in a fixed order (their series sorted as the summary lists them)."""
    gpus = GaugeMetricFamily("llmgw_fleet_gpus", "GPUs per class and state, from the facts at the last apply: "
                             "free (healthy, unheld, node ready), used (held by a replica), held_back "
                             "(healthy, unheld, node cordoned or draining), unhealthy", labels=["gpu_class", "state"])
    gpu_nodes = GaugeMetricFamily("llmgw_fleet_gpu_nodes", "Nodes with GPUs of the class", labels=["gpu_class"])
    gpu_mem = GaugeMetricFamily("llmgw_fleet_gpu_memory_bytes", "GPU memory of the class: total, used (absent "
                                "when a GPU of the class did not report it)", labels=["gpu_class", "kind"])
    for c in summary.gpus:
        for state in GPU_STATES:
            gpus.add_metric([c.gpu_class, state], getattr(c, state))
        gpu_nodes.add_metric([c.gpu_class], c.nodes)
        for kind, value in (("total", c.memory_total_bytes), ("used", c.memory_used_bytes)):
            if value is not None:
                gpu_mem.add_metric([c.gpu_class, kind], value)
    memory = GaugeMetricFamily("llmgw_node_memory_bytes", "A node's memory, from its facts", labels=["node"])
    gathered = GaugeMetricFamily("llmgw_node_facts_timestamp_seconds", "When the node's facts were gathered "
                                 "(stale facts show as old)", labels=["node"])
    for n in summary.nodes:
        gathered.add_metric([n.node], n.gathered_at)
        if n.memory_total_bytes is not None:
            memory.add_metric([n.node], n.memory_total_bytes)
    free = GaugeMetricFamily("llmgw_node_filesystem_free_bytes", "Free bytes of a filesystem holding a node's "
                             "model or cache dirs", labels=["node", "mount", "shared"])
    size = GaugeMetricFamily("llmgw_node_filesystem_size_bytes", "Size of a filesystem holding a node's model "
                             "or cache dirs", labels=["node", "mount", "shared"])
    for fs in summary.filesystems:
        labels = [fs.node, fs.mount, "true" if fs.shared else "false"]
        free.add_metric(labels, fs.free_bytes)
        size.add_metric(labels, fs.total_bytes)
    fabric_nodes = GaugeMetricFamily("llmgw_fabric_nodes", "Inventory nodes on the fabric", labels=["fabric"])
    whole = GaugeMetricFamily("llmgw_fabric_free_whole_nodes", "Ready nodes on the fabric with every GPU healthy "
                              "and unheld: the unit a multi-node replica is placed in", labels=["fabric"])
    for f in summary.fabrics:
        fabric_nodes.add_metric([f.fabric], f.nodes)
        whole.add_metric([f.fabric], f.free_whole_nodes)
    weights = GaugeMetricFamily("llmgw_fabric_weights_nodes", "Nodes of the fabric holding the model's weights "
                                "(of those that reported their weights)", labels=["fabric", "model"])
    for w in summary.weights:
        weights.add_metric([w.fabric, w.model], w.nodes)
    return [gpus, gpu_nodes, gpu_mem, memory, gathered, free, size, fabric_nodes, whole, weights]


def replica_family(table: RoutingTable) -> Metric:
    replicas = GaugeMetricFamily("llmgw_replicas", "Replicas per model and state, from the state the router "
                                 "routes by", labels=["model", "state"])
    for name in sorted(table.models):
        states: Counter[str] = Counter(r.state for r in table.models[name].replicas)
        for state in REPLICA_STATES:
            replicas.add_metric([name, state], states[state])
    return replicas


class FleetGauges(Collector):
    """The fleet gauges of one router: the summary in `site_dir` (None: the router has no
    site, so only the replicas are known) and the routing table."""

    def __init__(self, site_dir: Path | None, table: Callable[[], RoutingTable]) -> None:
        self.path = site_dir / FLEET_FILE if site_dir is not None else None
        self.table = table
        self._key: tuple[int, int] | None = None
        self._families: list[Metric] = []
        self._said: str | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def _summary(self) -> list[Metric]:
        if self.path is None:
            return []
        try:
            st = os.stat(self.path)
            key: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key is None or key != self._key:
            summary, why = read_fleet(self.path.parent)
            self._families = fleet_families(summary) if summary is not None else []
            self._key = key
            if why is not None and why != self._said:
                log.warning("fleet gauges absent: %s", why)
            self._said = why
        return self._families

    def collect(self) -> Iterator[Metric]:
        yield from self._summary()
        yield replica_family(self.table())

    def render(self) -> bytes:
        return generate_latest(self.registry)
