"""GPU health in placement: a broken, cordoned or unknown GPU is left out, the GPU and not
its host; unknown health is placed only where the host allows it.

On the recorded example site (its H200 hosts: Xid 79, a degraded PCIe link, a GPU
cordoned by hand) and on small in-memory fleets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from llmgw.facts.records import Gpu
from llmgw.planner import Plan, make_plan
from tests.planner.test_placement import placed_on, reasons
from tests.support.cli import run_cli
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example"


def h200s(sick: dict[int, str] | None = None, unknown: dict[int, str] | None = None) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H200", gpu_class="H200-141GB",
                problems=[sick[i]] if sick and i in sick else [],
                unknown=[unknown[i]] if unknown and i in unknown else []) for i in range(8)]


def test_the_example_rejects_exactly_the_broken_gpus_with_the_xid() -> None:
    plan = Plan.model_validate_json(run_cli("-C", str(EXAMPLE), "plan", "--json").stdout)
    entry = next(u for u in plan.unplaced if u.model == "llama-4-maverick")
    h200 = {r.node: r.reason for r in entry.rejections if r.profile == "h200-tp8"}
    assert h200["gpu-node-09"].startswith("gpu-node-09: 6 of 8 H200-141GB GPUs free, needs 8 (GPU 1 unhealthy: "
                                          "GPU 1 reported Xid 79 (GPU has fallen off the bus) in the kernel log at "
                                          "2026-11-30T04:12:09+00:00")
    assert "GPU 6 unhealthy: GPU 6's PCIe link is degraded: x8 of x16 lanes" in h200["gpu-node-09"]
    # GPU 2's application Xid and GPU 5's idle PCIe generation are notes: not left out.
    assert "GPU 2" not in h200["gpu-node-09"] and "GPU 5" not in h200["gpu-node-09"]
    # The profile requires driver >= 570, vLLM's wheel (CUDA 13.0) >= 580: the host with 535 is
    # rejected as a whole, naming its driver and the stricter of the two.
    assert h200["gpu-node-10"] == ("gpu-node-10: driver 535.183.01 supports CUDA 12.2; vLLM 0.32.0's wheel is "
                                   "built for CUDA 13.0 (needs driver >=580, stricter than the profile's >=570)")
    # No other host is rejected for its GPUs' health, and neither H200 host as a whole.
    for r in (r for u in plan.unplaced for r in u.rejections):
        if r.node not in ("gpu-node-09", "gpu-node-10"):
            assert "unhealthy: GPU" not in r.reason or r.node in ("gpu-node-06", "gpu-node-07"), r.reason
    placed = {s.node for r in plan.desired.replicas for s in r.shards}
    assert not placed & {"gpu-node-09", "gpu-node-10"}  # nothing else asks for H200s


def test_a_broken_gpu_leaves_its_host_placeable() -> None:
    m = model("m", gpu_profile(gpus=4, gpu_class="H200-141GB"), min=2)
    sick = h200s(sick={1: "GPU 1 reported Xid 79 (GPU has fallen off the bus)", 6: "GPU 6's PCIe link is degraded"})
    plan = make_plan(inputs([m], [host("a")], [facts("a", gpu_list=sick)]))
    shards = [s for r in plan.desired.replicas for s in r.shards]
    assert [s.gpus for s in shards] == [[0, 2, 3, 4]]  # one shard, on the healthy GPUs
    assert reasons(plan, "m") == ["a: 2 of 8 H200-141GB GPUs free, needs 4 (GPU 1 unhealthy: GPU 1 reported Xid 79 "
                                  "(GPU has fallen off the bus); GPU 6 unhealthy: GPU 6's PCIe link is degraded)"]


def test_unknown_health_is_not_placed_unless_the_host_allows_it() -> None:
    m = model("m", gpu_profile(gpus=8, gpu_class="H200-141GB"))
    why = "GPU 3: Xid errors since boot are not known: the kernel log could not be read (dmesg: not permitted)"
    fs = [facts("a", gpu_list=h200s(unknown={3: why}))]
    denied = make_plan(inputs([m], [host("a")], fs))
    assert placed_on(denied, "m") == []
    assert reasons(denied, "m") == [f"a: 7 of 8 H200-141GB GPUs free, needs 8 (GPU 3 health unknown: {why} (set "
                                    "llmgw_gpu_health_unknown: allow for a to place on it anyway))"]
    allowing = dataclasses.replace(host("a"), gpu_health_unknown="allow")
    assert placed_on(make_plan(inputs([m], [allowing], fs)), "m") == [["a"]]


def test_a_gpu_cordoned_by_hand_is_left_out() -> None:
    m = model("m", gpu_profile(gpus=2, gpu_class="H200-141GB"), min=4)
    cordoned = dataclasses.replace(host("a"), cordoned_gpus=frozenset({0, 5}))
    plan = make_plan(inputs([m], [cordoned], [facts("a", gpu_list=h200s())]))
    assert sorted(g for r in plan.desired.replicas for s in r.shards for g in s.gpus) == [1, 2, 3, 4, 6, 7]
