"""NUMA/PCIe-aware shards: which GPU indices a shard gets on its host, which adapters NCCL is
given with them, and the NUMA binding the unit carries; all shown in the plan.

The hosts are 8-GPU, two-NUMA-node machines with four InfiniBand adapters, one on each PCIe
root beside two GPUs, as gpu_facts and ib_facts record them (tests/facts/test_gpu_topology.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmgw.errors import PlanError
from llmgw.facts.records import Gpu, HostFacts, IbAdapter, IbPort, TopologyLevel
from llmgw.planner import MapFabrics, Plan, make_plan
from llmgw.planner.render import render_plan
from llmgw.planner.schema import load_plan
from llmgw.planner.topology import gpu_map, pick_gpus
from llmgw.state import State
from tests.support.cli import run_cli
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example"

ROOTS = ("pci0000:15", "pci0000:15", "pci0000:3a", "pci0000:3a", "pci0000:9a", "pci0000:9a", "pci0000:c0",
         "pci0000:c0")


def level(a: int, b: int) -> TopologyLevel:
    if a // 2 == b // 2:
        return "single"  # one PCIe switch
    return "node" if a // 4 == b // 4 else "system"


def two_numa_gpus(sick: frozenset[int] = frozenset()) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-4f3c2a1b-0000-4000-8000-00000000000{i}", name="NVIDIA H200",
                gpu_class="H200-141GB", numa_node=i // 4, pci_root=ROOTS[i],
                topology={j: level(i, j) for j in range(8) if j != i},
                problems=["GPU reported Xid 79"] if i in sick else []) for i in range(8)]


def adapters() -> list[IbAdapter]:
    return [IbAdapter(name=f"mlx5_{k}", pci_bus_id=bus, numa_node=k // 2, pci_root=ROOTS[2 * k],
                      ports=[IbPort(port=1, state="ACTIVE", link_layer="InfiniBand")])
            for k, bus in enumerate(("0000:1c:00.0", "0000:3b:00.0", "0000:9b:00.0", "0000:c1:00.0"))]


def two_numa_host(name: str, sick: frozenset[int] = frozenset()) -> HostFacts:
    return facts(name, gpu_list=two_numa_gpus(sick)).model_copy(update={"ib_adapters": adapters()})


FABRIC = MapFabrics(leaves={n: {"fab-a": {f"mlx5_{k}/1": f"leaf-{k}" for k in range(4)}} for n in ("a", "b")})


def replicas(plan: Plan) -> dict[str, list[tuple[str, list[int]]]]:
    return {r.id: [(s.node, s.gpus) for s in r.shards] for r in plan.desired.replicas}


def test_two_gpus4_shards_each_on_one_numa_node_with_its_adapters_sharing_nothing() -> None:
    """The issue's Done-when: a `gpus: 4` shard lands on one NUMA node's GPUs with that node's
    adapters in NCCL_IB_HCA, and two such shards share nothing."""
    m = model("big", gpu_profile(gpus=4, nodes=2, gpu_class="H200-141GB"), min=2)
    plan = make_plan(inputs([m], [host("a"), host("b")], [two_numa_host("a"), two_numa_host("b")],
                            fabrics=FABRIC))
    assert not plan.unplaced
    shards = [s for r in plan.desired.replicas for s in r.shards]
    assert len(shards) == 4
    for s in shards:
        assert s.topology is not None
        numa = s.topology.numa_node
        assert numa in (0, 1) and all(g // 4 == numa for g in s.gpus)
        assert s.topology.level == "one NUMA node"
        assert s.topology.ib_hcas == ([f"mlx5_{2 * numa}:1", f"mlx5_{2 * numa + 1}:1"])
        assert s.topology.ib_why == "on the GPUs' PCIe roots"
        assert s.topology.gpu_uuids == [f"GPU-4f3c2a1b-0000-4000-8000-00000000000{g}" for g in s.gpus]
        assert not s.topology.numa_bind  # the profile did not ask
    for node in ("a", "b"):
        on = [s for s in shards if s.node == node]
        assert len(on) == 2
        gpus = [set(s.gpus) for s in on]
        assert gpus[0].isdisjoint(gpus[1]) and gpus[0] | gpus[1] == set(range(8))
        assert on[0].topology is not None and on[1].topology is not None
        hcas = [set(t.ib_hcas or []) for t in (on[0].topology, on[1].topology)]
        assert hcas[0].isdisjoint(hcas[1])
        assert {on[0].topology.numa_node, on[1].topology.numa_node} == {0, 1}


def test_numa_bind_is_in_the_plan_and_its_text() -> None:
    m = model("m", gpu_profile(gpus=4, gpu_class="H200-141GB", numa="bind"), min=2)
    plan = make_plan(inputs([m], [host("a")], [two_numa_host("a")]))
    got = sorted((s.gpus, s.topology.numa_node, s.topology.numa_bind) for r in plan.desired.replicas
                 for s in r.shards if s.topology)
    assert got == [([0, 1, 2, 3], 0, True), ([4, 5, 6, 7], 1, True)]
    text = render_plan(plan, State(lineage="test"))
    assert '"GPUs on one NUMA node (NUMA node 0); CPUs and memory bound to NUMA node 0"' in text
    # A single-node replica uses no fabric: NCCL is given no adapters, the unit no verbs devices.
    assert all(s.topology and s.topology.ib_hcas is None for r in plan.desired.replicas for s in r.shards)


def test_a_shard_is_packed_under_one_switch_before_a_host_bridge_and_fills_a_started_numa_node() -> None:
    m = gpu_map(two_numa_gpus())
    assert pick_gpus(list(range(8)), 2, m).gpus == [0, 1]
    assert pick_gpus(list(range(8)), 2, m).level == "one PCIe switch"
    # GPUs 0 and 1 taken: a second pair fills NUMA node 0 (best fit) before breaking into node 1.
    assert pick_gpus([2, 3, 4, 5, 6, 7], 2, m).gpus == [2, 3]
    # ...and four GPUs go to the whole NUMA node 1, not across the CPU interconnect (2, 3, 4, 5).
    four = pick_gpus([2, 3, 4, 5, 6, 7], 4, m)
    assert (four.gpus, four.level, four.numa_node) == ([4, 5, 6, 7], "one NUMA node", 1)
    # Nothing fits within one node: the pick says it crosses.
    across = pick_gpus([0, 2, 4, 6, 7], 4, m)
    assert across.level == "across NUMA nodes (the CPU interconnect)" and across.numa_node is None


def test_nvlink_peers_come_before_a_shared_switch() -> None:
    gpus = [g.model_copy(update={"nvlink_peers": {1: [2], 2: [1]}.get(g.index)}) for g in two_numa_gpus()]
    m = gpu_map(gpus)
    # 1 and 2 sit under different switches, joined by an NVLink bridge: the closest pair.
    picked = pick_gpus([1, 2, 3, 4, 5, 6, 7], 2, m)
    assert (picked.gpus, picked.level) == ([1, 2], "NVLink")


def test_a_broken_gpu_is_left_out_and_the_shard_packs_around_it() -> None:
    m = model("m", gpu_profile(gpus=4, gpu_class="H200-141GB"), min=1)
    plan = make_plan(inputs([m], [host("a")], [two_numa_host("a", sick=frozenset({1}))]))
    (r,) = plan.desired.replicas
    assert r.shards[0].gpus == [4, 5, 6, 7]  # NUMA node 0 has three healthy GPUs left


def test_a_host_without_topology_facts_keeps_the_lowest_free_indices() -> None:
    m = model("m", gpu_profile(gpus=2), min=1)
    plan = make_plan(inputs([m], [host("a")], [facts("a")]))
    (r,) = plan.desired.replicas
    assert r.shards[0].gpus == [0, 1] and r.shards[0].topology is None  # helper UUIDs are not NVML's
    assert gpu_map(facts("a").gpus or []) is None


def test_adapters_fall_back_to_the_numa_node_then_to_every_one_on_the_fabric() -> None:
    no_roots = [a.model_copy(update={"pci_root": None}) for a in adapters()]
    m = model("big", gpu_profile(gpus=4, nodes=2, gpu_class="H200-141GB"), min=1)
    for ib, want, why in ((no_roots, ["mlx5_0:1", "mlx5_1:1"], "on NUMA node 0"),
                          ([a.model_copy(update={"pci_root": None, "numa_node": None}) for a in adapters()],
                           [f"mlx5_{k}:1" for k in range(4)],
                           "every adapter of the node on the fabric (none known nearer the GPUs)")):
        hosts = [two_numa_host(n).model_copy(update={"ib_adapters": ib}) for n in ("a", "b")]
        plan = make_plan(inputs([m], [host("a"), host("b")], hosts, fabrics=FABRIC))
        t = plan.desired.replicas[0].shards[0].topology
        assert t is not None and (t.ib_hcas, t.ib_why) == (want, why)


def test_the_example_h200_host_packs_a_pair_beside_its_broken_gpu(tmp_path: Path) -> None:
    """On the recorded example site: gpu-node-09's facts carry two NUMA nodes, an NVSwitch board
    and four adapters; with GPU 1 broken, a two-GPU shard takes the pair under one PCIe switch
    on NUMA node 0 (2, 3), and the plan's text says where and why."""
    site = tmp_path / "example"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns("state.json", "state.json.lock", "*.sqlite"))
    large = site / "catalog" / "large.yaml"
    text = large.read_text()
    old = "        gpus: 8\n        gpu_class: H200-141GB\n"
    assert old in text
    large.write_text(text.replace(old, "        gpus: 2\n        gpu_class: H200-141GB\n        numa: bind\n"))
    plan = Plan.model_validate_json(run_cli("-C", str(site), "plan", "--json").stdout)
    (r,) = [r for r in plan.desired.replicas if r.model == "llama-4-maverick"]
    (s,) = r.shards
    assert (s.node, s.gpus) == ("gpu-node-09", [2, 3])
    assert s.topology is not None
    assert (s.topology.level, s.topology.numa_node, s.topology.numa_bind) == ("NVLink", 0, True)
    assert s.topology.gpu_uuids[0].startswith("GPU-")
    shown = run_cli("-C", str(site), "plan").stdout
    assert '"GPUs on NVLink (NUMA node 0); CPUs and memory bound to NUMA node 0"' in shown


def test_explain_names_the_level(tmp_path: Path) -> None:
    site = tmp_path / "example"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns("state.json", "state.json.lock", "*.sqlite"))
    large = site / "catalog" / "large.yaml"
    large.write_text(large.read_text().replace("        gpus: 8\n        gpu_class: H200-141GB\n",
                                               "        gpus: 2\n        gpu_class: H200-141GB\n"))
    out = run_cli("-C", str(site), "explain", "llama-4-maverick").stdout
    assert "gpu-node-09 GPUs [2, 3] on NVLink (NUMA node 0) port" in out


def test_a_fabric_manager_down_keeps_the_whole_host_out_with_the_reason() -> None:
    m = model("m", gpu_profile(gpus=1, gpu_class="H200-141GB"), min=1)
    down = two_numa_host("a").model_copy(update={"fabric_manager": "failed"})
    plan = make_plan(inputs([m], [host("a")], [down]))
    assert not plan.desired.replicas
    (u,) = plan.unplaced
    (why,) = [r.reason for r in u.rejections if r.node == "a"]
    assert why.startswith("a: 0 of 8 H200-141GB GPUs free, needs 1 (GPU 0 unusable: nvidia-fabricmanager is failed")


@pytest.mark.parametrize(("change", "says"), [
    ({"gpu_uuids": ["GPU-1 ExecStartPre=/bin/sh", "GPU-2", "GPU-3", "GPU-4"]}, "gpu_uuids"),
    ({"ib_hcas": ["mlx5_0\nExecStartPre=/bin/sh"]}, "ib_hcas"),
    ({"gpu_uuids": ["GPU-1"]}, "topology.gpu_uuids names 1 GPUs, the shard has 4"),
    ({"numa_bind": True, "numa_node": None}, "numa_bind is set but the shard's GPUs share no numa_node"),
])
def test_a_saved_plan_with_tampered_topology_is_refused(change: dict[str, object], says: str) -> None:
    m = model("big", gpu_profile(gpus=4, nodes=2, gpu_class="H200-141GB"), min=1)
    plan = make_plan(inputs([m], [host("a"), host("b")], [two_numa_host("a"), two_numa_host("b")],
                            fabrics=FABRIC))
    doc = json.loads(plan.to_json())
    doc["desired"]["replicas"][0]["shards"][0]["topology"].update(change)
    assert load_plan(json.dumps(plan.model_dump(mode="json")), "plan.json").desired == plan.desired
    with pytest.raises(PlanError) as err:
        load_plan(json.dumps(doc), "plan.json")
    assert says in str(err.value) + " ".join(getattr(err.value, "detail", []) or [])
