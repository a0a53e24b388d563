"""The fleet gauges (llmgw.router.fleet_gauges): the bastion's summary of the fleet, exported
by the router; unknown is absent, never zero (#35).

The summary is made the way apply makes it (llmgw.views.planned.site_copy_files) from the
example site, and read back from a site copy the way a router reads it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from llmgw.fleetfile import (
    FLEET_FILE,
    FabricNodes,
    FabricWeights,
    FleetSummary,
    GpuClass,
    NodeFilesystem,
    NodeNumbers,
)
from llmgw.router.fleet_gauges import FleetGauges
from llmgw.router.table import RoutingTable
from llmgw.site import Site
from llmgw.state import State
from llmgw.views.nodes import gpu_holders
from llmgw.views.planned import load_site_data, site_copy_files
from llmgw.views.status import capacity
from tests.support.example_site import example_site
from tests.support.router import model, replica

SUMMARY = FleetSummary(
    gpus=(GpuClass(gpu_class="H100-80GB", nodes=2, free=9, used=4, held_back=2, unhealthy=1,
                   memory_total_bytes=16 * 85899345920, memory_used_bytes=1073741824),
          GpuClass(gpu_class="L40S-48GB", nodes=1, free=2, used=0, held_back=0, unhealthy=0)),
    nodes=(NodeNumbers(node="gpu-1", gathered_at=1796017213.0, memory_total_bytes=2164009205760),
           NodeNumbers(node="gpu-2", gathered_at=1796017214.5)),
    filesystems=(NodeFilesystem(node="gpu-1", mount="/var/cache/llmgw", shared=False, free_bytes=10**12,
                                total_bytes=4 * 10**12),),
    fabrics=(FabricNodes(fabric="ib-a", nodes=2, free_whole_nodes=1),),
    weights=(FabricWeights(fabric="ib-a", model="llama", nodes=2), FabricWeights(fabric="ib-a", model="qwen", nodes=0)))

# Exactly what Prometheus reads for SUMMARY: help and type lines aside, every series, in order.
LINES = [
    'llmgw_fleet_gpus{gpu_class="H100-80GB",state="free"} 9.0',
    'llmgw_fleet_gpus{gpu_class="H100-80GB",state="used"} 4.0',
    'llmgw_fleet_gpus{gpu_class="H100-80GB",state="held_back"} 2.0',
    'llmgw_fleet_gpus{gpu_class="H100-80GB",state="unhealthy"} 1.0',
    'llmgw_fleet_gpus{gpu_class="L40S-48GB",state="free"} 2.0',
    'llmgw_fleet_gpus{gpu_class="L40S-48GB",state="used"} 0.0',
    'llmgw_fleet_gpus{gpu_class="L40S-48GB",state="held_back"} 0.0',
    'llmgw_fleet_gpus{gpu_class="L40S-48GB",state="unhealthy"} 0.0',
    'llmgw_fleet_gpu_nodes{gpu_class="H100-80GB"} 2.0',
    'llmgw_fleet_gpu_nodes{gpu_class="L40S-48GB"} 1.0',
    'llmgw_fleet_gpu_memory_bytes{gpu_class="H100-80GB",kind="total"} 1.37438953472e+12',
    'llmgw_fleet_gpu_memory_bytes{gpu_class="H100-80GB",kind="used"} 1.073741824e+09',
    'llmgw_node_memory_bytes{node="gpu-1"} 2.16400920576e+12',
    'llmgw_node_facts_timestamp_seconds{node="gpu-1"} 1.796017213e+09',
    'llmgw_node_facts_timestamp_seconds{node="gpu-2"} 1.7960172145e+09',
    'llmgw_node_filesystem_free_bytes{mount="/var/cache/llmgw",node="gpu-1",shared="false"} 1e+12',
    'llmgw_node_filesystem_size_bytes{mount="/var/cache/llmgw",node="gpu-1",shared="false"} 4e+12',
    'llmgw_fabric_nodes{fabric="ib-a"} 2.0',
    'llmgw_fabric_free_whole_nodes{fabric="ib-a"} 1.0',
    'llmgw_fabric_weights_nodes{fabric="ib-a",model="llama"} 2.0',
    'llmgw_fabric_weights_nodes{fabric="ib-a",model="qwen"} 0.0',
    'llmgw_replicas{model="tiny",state="starting"} 1.0',
    'llmgw_replicas{model="tiny",state="ready"} 2.0',
    'llmgw_replicas{model="tiny",state="draining"} 0.0',
]


def _table() -> RoutingTable:
    return RoutingTable(State(lineage="l", serial=3, models=[model("tiny")], replicas=[
        replica("tiny-0", "tiny", "http://127.0.0.1:1"), replica("tiny-1", "tiny", "http://127.0.0.1:2"),
        replica("tiny-2", "tiny", "http://127.0.0.1:3", state="starting")]))


def _series(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if line and not line.startswith("#")]


def test_a_summary_gives_exactly_these_series(tmp_path: Path) -> None:
    (tmp_path / FLEET_FILE).write_text(SUMMARY.to_json())
    table = _table()
    assert _series(FleetGauges(tmp_path, lambda: table).render()) == LINES


def test_what_is_not_known_is_absent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No memory reported: no memory series (not 0). No summary at all: only the replicas,
    which the router always knows, and why once in the log."""
    (tmp_path / FLEET_FILE).write_text(SUMMARY.to_json())
    table = _table()
    got = _series(FleetGauges(tmp_path, lambda: table).render())
    assert not [line for line in got if 'gpu_class="L40S-48GB",kind=' in line]
    assert not [line for line in got if line.startswith('llmgw_node_memory_bytes{node="gpu-2"}')]
    (tmp_path / FLEET_FILE).unlink()
    gauges = FleetGauges(tmp_path, lambda: table)
    with caplog.at_level(logging.WARNING, logger="llmgw.router"):
        first, second = _series(gauges.render()), _series(gauges.render())
    assert first == second == LINES[-3:]
    assert [r.getMessage() for r in caplog.records] == [
        f"fleet gauges absent: no {tmp_path / FLEET_FILE}: the fleet gauges come with apply's site copy "
        "(run `llmgw apply`)"]
    assert _series(FleetGauges(None, lambda: table).render()) == LINES[-3:]  # a router without a site


def test_a_summary_that_does_not_read_is_no_summary(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = json.loads(SUMMARY.to_json())
    bad["gpus"][0]["free"] = -1
    (tmp_path / FLEET_FILE).write_text(json.dumps(bad))
    table = _table()
    with caplog.at_level(logging.WARNING, logger="llmgw.router"):
        assert _series(FleetGauges(tmp_path, lambda: table).render()) == LINES[-3:]
    assert caplog.records[0].getMessage() == (
        f"fleet gauges absent: {tmp_path / FLEET_FILE} is not a fleet summary apply writes "
        "(gpus.0.free: Input should be greater than or equal to 0); `llmgw apply` replaces it")


def test_a_new_summary_is_read_when_apply_replaces_it(tmp_path: Path) -> None:
    (tmp_path / FLEET_FILE).write_text(SUMMARY.to_json())
    table = _table()
    gauges = FleetGauges(tmp_path, lambda: table)
    assert 'llmgw_fabric_free_whole_nodes{fabric="ib-a"} 1.0' in _series(gauges.render())
    changed = SUMMARY.model_copy(update={"fabrics": (FabricNodes(fabric="ib-a", nodes=2, free_whole_nodes=0),)})
    (tmp_path / FLEET_FILE).write_text(changed.to_json() + " ")  # another size: seen whatever the clock
    assert 'llmgw_fabric_free_whole_nodes{fabric="ib-a"} 0.0' in _series(gauges.render())


def test_the_bastion_summarises_the_example_site_as_its_views_count_it(tmp_path: Path) -> None:
    """Made as apply makes it, the summary's GPU counts are the status view's capacity, every
    inventory node with facts has its filesystems, and a node without GPU facts is in no class."""
    root = example_site(tmp_path)
    site = Site.load(root)
    facts_file = root / "facts" / "l40s-02.json"
    facts = json.loads(facts_file.read_text())
    facts["gpus"], facts["gpus_unknown_reason"] = None, "no NVIDIA driver"
    facts_file.write_text(json.dumps(facts))
    summary = FleetSummary.model_validate_json(site_copy_files(site)[FLEET_FILE])
    data = load_site_data(site)
    caps, unknown = capacity(data, gpu_holders(data))
    assert "l40s-02" in unknown
    assert [(c.gpu_class, c.free, c.used, c.held_back, c.unhealthy, c.nodes) for c in summary.gpus] == \
        [(c["gpu_class"], c["free"], c["used"], c["held_back"], c["unhealthy"], c["nodes"]) for c in caps]
    l40s = next(c for c in summary.gpus if c.gpu_class == "L40S-48GB")
    assert l40s.nodes == 1  # l40s-02's GPUs are not known: not counted, in no state
    with_fs = {n for n, f in data.facts.items() if n in data.inventory.nodes and f.filesystems}
    assert {fs.node for fs in summary.filesystems} == with_fs
    assert {(fs.node, fs.mount, fs.free_bytes) for fs in summary.filesystems} == {
        (n, fs.mount, fs.free_bytes) for n in with_fs for fs in data.facts[n].filesystems or []}
    held = {(w.fabric, w.model): w.nodes for w in summary.weights}
    assert {f for f, _m in held} == set(data.fabric_map.glances)  # every node reported its weights
    cached = {n for n, f in data.facts.items()  # llmgw's own cache entry for it (of the pinned revision)
              if any(w.cache and w.path.endswith("-Llama-3.1-70B-Instruct") for w in f.weights or [])}
    assert cached == {"gpu-node-01", "gpu-node-02"}
    for fid in data.fabric_map.glances:
        members = {n for n in data.inventory.nodes if fid in data.fabric_map.fabrics_of(n)}
        assert held[(fid, "llama-3.1-70b")] >= len(cached & members) >= (2 if "gpu-node-01" in members else 0)
        assert held[(fid, "grok-1")] == 0  # on no node at all: a known zero, not an absent series
