"""Filters reject with a sentence naming node and shortfall; preferences rank, never reject."""

from __future__ import annotations

import pytest

from llmgw.facts.records import Weights
from llmgw.planner import MapFabrics, Plan, make_plan
from llmgw.planner.fleet import Fleet
from llmgw.weights.names import cache_name
from tests.support.plan_inputs import cpu_profile, facts, gpu_profile, gpus, host, inputs, model


def reasons(plan: Plan, name: str) -> list[str]:
    entry = next(u for u in plan.unplaced if u.model == name)
    return [r.reason for r in entry.rejections]


def placed_on(plan: Plan, name: str) -> list[list[str]]:
    return [[s.node for s in r.shards] for r in plan.desired.replicas if r.model == name]


def test_each_filter_names_the_node_and_the_shortfall() -> None:
    m = model("m", gpu_profile(gpus=4, gpu_class="H100-80GB", min_memory_gb=24, node_selector={"role": "x"}))
    hosts = [host("a", labels={"role": "x"}), host("b", "cordoned", {"role": "x"}), host("c", labels={"role": "y"}),
             host("d", labels={"role": "x"}), host("e", labels={"role": "x"}), host("f", labels={"role": "x"}),
             host("g", labels={"role": "x"}), host("h", "draining", {"role": "x"})]
    fs = [facts("a", 8, mem_gb=8), facts("c", 8), facts("d", 8, cls="A100-80GB"), facts("e", 2),
          facts("f", None), facts("g", gpu_list=gpus(8, sick={0: "GPU lost", 1: "ECC", 2: "x", 3: "y", 4: "z"}))]
    got = reasons(make_plan(inputs([m], hosts, fs)), "m")
    assert got == [
        "a: has 8 GB of memory, needs 24",
        "b: cordoned",
        "c: does not match node_selector role=x (has role=y)",
        "d: has no H100-80GB GPUs (has 8 A100-80GB), needs 4",
        "e: has 2 H100-80GB GPUs, needs 4",
        "f: GPUs not known (not reported), needs 4 H100-80GB GPUs",
        "g: 3 of 8 H100-80GB GPUs free, needs 4 (GPU 0 unhealthy: GPU lost; GPU 1 unhealthy: ECC; 3 more left out)",
        "h: draining",
    ]


def test_gpus_taken_by_earlier_replicas_are_not_free() -> None:
    m = model("m", gpu_profile(gpus=3), min=3)
    plan = make_plan(inputs([m], [host("a")], [facts("a", 8)]))
    assert len(plan.desired.replicas) == 2
    assert reasons(plan, "m") == ["a: 2 of 8 GPUs free, needs 3"]
    assert [r.shards[0].gpus for r in plan.desired.replicas] == [[0, 1, 2], [3, 4, 5]]


def test_unknown_resources_pass_their_filter() -> None:
    m = model("m", cpu_profile(mem=64))
    plan = make_plan(inputs([m], [host("a")], [facts("a", 0, mem_gb=None)], sizes={m.source: 10**12}))
    assert placed_on(plan, "m") == [["a"]]


def test_no_facts_at_all_takes_cpu_but_not_gpu_profiles() -> None:
    cpu = model("cpu", cpu_profile(mem=512))
    gpu = model("gpu", gpu_profile(gpus=1))
    plan = make_plan(inputs([cpu, gpu], [host("a")]))
    assert placed_on(plan, "cpu") == [["a"]]
    assert reasons(plan, "gpu") == ["a: no facts gathered yet, needs 1 GPUs (run `llmgw facts`)"]


def test_memory_is_reserved_by_each_replica() -> None:
    m = model("m", cpu_profile(mem=10), min=3)
    plan = make_plan(inputs([m], [host("a")], [facts("a", 0, mem_gb=25)]))
    assert len(plan.desired.replicas) == 2
    assert reasons(plan, "m") == ["a: 5 of 25 GB of memory unreserved, needs 10"]


def test_disk_filter_counts_weights_once_and_skips_holders() -> None:
    a = model("a", cpu_profile(), source="hf://o/r/a.gguf")
    b = model("b", cpu_profile(), source="hf://o/r/b.gguf", min=2)
    gb = 1024**3
    sizes = {a.source: 60 * gb, b.source: 30 * gb}
    held = Weights(path="/var/cache/llmgw/x", size_bytes=1, cache=True, cache_name=cache_name(b.source))
    fs = [facts("n1", 0, disk_free_gb=20), facts("n2", 0, disk_free_gb=50, weights=[held])]
    plan = make_plan(inputs([a, b], [host("n1"), host("n2")], fs, sizes=sizes))
    assert reasons(plan, "a") == ["n1: 20 GB free on / (holding /var/cache/llmgw), weights need 60 GB",
                                  "n2: 50 GB free on / (holding /var/cache/llmgw), weights need 60 GB"]
    # b's weights are on n2 already and n1 has no room for them: both replicas go to n2 (spread
    # would put the second apart, but only onto a node that fits), and no disk is spent there.
    assert placed_on(plan, "b") == [["n2"], ["n2"]]
    # With room on n1, the second goes apart: spread first, weights only break ties.
    fs = [facts("n1", 0, disk_free_gb=50), facts("n2", 0, disk_free_gb=50, weights=[held])]
    assert placed_on(make_plan(inputs([b], [host("n1"), host("n2")], fs, sizes=sizes)), "b") == [["n2"], ["n1"]]


def test_shared_filesystem_is_one_pool() -> None:
    a = model("a", cpu_profile(), source="hf://o/r/a.gguf", min=2)
    c = model("c", cpu_profile(), source="hf://o/r/c.gguf")
    gb = 1024**3
    fs = [facts(n, 0, disk_free_gb=100, shared_device="filer:/models", mem_gb=10) for n in ("n1", "n2")]
    plan = make_plan(inputs([a, c], [host("n1"), host("n2")], fs, sizes={a.source: 60 * gb, c.source: 60 * gb}))
    assert len(placed_on(plan, "a")) == 2  # one copy serves both nodes
    assert reasons(plan, "c") == ["n1: 40 GB free on shared /srv (holding /var/cache/llmgw), weights need 60 GB",
                                  "n2: 40 GB free on shared /srv (holding /var/cache/llmgw), weights need 60 GB"]


def test_profiles_are_tried_in_catalog_order() -> None:
    m = model("m", gpu_profile("big", gpus=8), gpu_profile("small", gpus=2))
    plan = make_plan(inputs([m], [host("a")], [facts("a", 4)]))
    assert [r.profile for r in plan.desired.replicas] == ["small"]


def test_packing_prefers_partly_used_nodes_and_best_fit() -> None:
    big = model("big", gpu_profile(gpus=6))
    small = model("small", gpu_profile(gpus=2), min=2)
    plan = make_plan(inputs([big, small], [host("a"), host("b"), host("c")], [facts(n, 8) for n in "abc"]))
    # big lands on a; both smalls fill what is left of a, so b and c stay whole.
    assert placed_on(plan, "big") == [["a"]]
    assert placed_on(plan, "small") == [["a"], ["b"]]


def test_nodes_holding_the_weights_come_first() -> None:
    m = model("m", gpu_profile(gpus=1))
    held = Weights(path="/var/cache/llmgw/x", size_bytes=1, cache=True, cache_name=cache_name(m.source))
    plan = make_plan(inputs([m], [host("a"), host("b")], [facts("a", 8), facts("b", 8, weights=[held])]))
    assert placed_on(plan, "m") == [["b"]]


def test_operator_file_counts_as_holding_the_weights() -> None:
    m = model("m", gpu_profile(gpus=1), source="hf://org/repo/weights.gguf")
    own = Weights(path="/srv/models/weights.gguf", size_bytes=1, cache=False)
    plan = make_plan(inputs([m], [host("a"), host("b")], [facts("a", 8), facts("b", 8, weights=[own])]))
    assert placed_on(plan, "m") == [["b"]]
    assert [s.present_at for s in plan.desired.replicas[0].shards] == ["/srv/models/weights.gguf"]


def test_holders_are_found_by_cache_entry_file_path_and_file_name_in_name_order() -> None:
    src = "file:///srv/models/w.gguf"
    cached = Weights(path="/var/cache/llmgw/x", size_bytes=1, cache=True, cache_name=cache_name(src))
    same_path = Weights(path="/srv/models/w.gguf", size_bytes=1, cache=False)
    same_name = Weights(path="/elsewhere/w.gguf", size_bytes=1, cache=False)
    other = Weights(path="/srv/models/v.gguf", size_bytes=1, cache=False)
    inp = inputs([model("m", gpu_profile(gpus=1), source=src)], [host(n) for n in "abcde"],
                 [facts("e", 8, weights=[cached]), facts("a", 8, weights=[same_path]),
                  facts("c", 8, weights=[same_name, same_path]), facts("d", 8, weights=[other]), facts("b", 8)])
    fleet = Fleet(inp.nodes, inp.facts, inp.fabrics, inp.ports)
    assert [n.name for n in fleet.holders(src, cache_name(src))] == ["a", "c", "e"]
    assert fleet.holder_set(src, cache_name(src)) == {0, 2, 4}
    assert fleet.holders("file:///nowhere/u.gguf", cache_name("file:///nowhere/u.gguf")) == []


def test_cpu_profiles_prefer_nodes_without_gpus() -> None:
    m = model("m", cpu_profile())
    plan = make_plan(inputs([m], [host("a"), host("z")], [facts("a", 8), facts("z", 0)]))
    assert placed_on(plan, "m") == [["z"]]


FABRIC = MapFabrics(
    leaves={
        "n1": {"ib": {"mlx5_0": "leaf-1"}}, "n2": {"ib": {"mlx5_0": "leaf-2"}},
        "n3": {"ib": {"mlx5_0": "leaf-2"}}, "n4": {"ib": {"mlx5_0": "leaf-1"}},
        "n5": {"ib2": {"mlx5_0": "leaf-9"}},
    },
    degraded=frozenset({("n4", "ib")}),
)


def test_multi_node_needs_whole_nodes_on_one_fabric() -> None:
    m = model("m", gpu_profile(gpus=8, nodes=3))
    hosts = [host(f"n{i}") for i in range(1, 7)]
    fs = [facts(f"n{i}", 8) for i in range(1, 7)]
    plan = make_plan(inputs([m], hosts, fs, fabrics=FABRIC))
    assert placed_on(plan, "m") == [["n1", "n2", "n3"]]  # n4's cable is degraded: last


def test_multi_node_prefers_one_leaf() -> None:
    m = model("m", gpu_profile(gpus=8, nodes=2))
    hosts = [host(f"n{i}") for i in range(1, 5)]
    plan = make_plan(inputs([m], hosts, [facts(f"n{i}", 8) for i in range(1, 5)], fabrics=FABRIC))
    # n1+n4 share leaf-1 but n4 is degraded; n2+n3 share leaf-2 with clean cables.
    assert placed_on(plan, "m") == [["n2", "n3"]]
    assert plan.desired.replicas[0].fabric == "ib"


def test_multi_node_rejection_names_the_fabric() -> None:
    m = model("m", gpu_profile(gpus=8, nodes=2))
    hosts = [host("n1"), host("n2"), host("n5"), host("n6")]
    fs = [facts("n1", 8), facts("n2", 4), facts("n5", 8), facts("n6", 8)]
    assert reasons(make_plan(inputs([m], hosts, fs, fabrics=FABRIC)), "m") == [
        "n2: has 4 GPUs, needs 8",
        "n6: on no InfiniBand fabric, and a 2-node profile needs one",
        "fabric ib: 1 node with 8 GPUs free, needs 2",
        "fabric ib2: 1 node with 8 GPUs free, needs 2",
    ]


def test_ports_come_from_the_range_and_run_out_with_a_reason() -> None:
    m = model("m", cpu_profile(), min=3)
    plan = make_plan(inputs([m], [host("a")], [facts("a", 0)], ports=(30000, 30001)))
    assert [r.shards[0].port for r in plan.desired.replicas] == [30000, 30001]
    assert reasons(plan, "m") == ["a: every port in 30000-30001 is taken"]


def test_static_sets_keep_exactly_the_nodes_static_reason_passes() -> None:
    """static_set asks the sentence-free `static_ok`; it must agree with `static_reason` on every
    kind of node and ask (states, selectors, facts, GPU classes and counts, memory, fabrics, file:// paths)."""
    from itertools import product

    from llmgw.planner.fleet import StaticKey
    from llmgw.planner.placement import static_ok, static_reason

    hosts = [host("a", labels={"role": "x"}), host("b", "cordoned", {"role": "x"}), host("c", labels={"role": "y"}),
             host("d"), host("e", labels={"role": "x"}), host("f"), host("g"), host("h", "draining"),
             host("i"), host("j"), host("k", labels={"role": "x", "zone": "1"}), host("l", model_dirs=()),
             host("m", model_dirs=("/", "/srv/models/m.gguf"))]
    fs = [facts("a", 8, mem_gb=8), facts("c", 8), facts("l", 8), facts("m", 8), facts("d", 8, cls="A100-80GB"),
          facts("e", 2), facts("f", None),
          facts("g", gpu_list=gpus(8, sick={0: "GPU lost"})), facts("h", 8), facts("i", 0),
          facts("j", gpu_list=gpus(4) + [g.model_copy(update={"index": 4 + g.index}) for g in gpus(4, "A100-80GB")]),
          facts("k", 8, mem_gb=None)]
    fabrics = MapFabrics(leaves={n: {"ib0": {"mlx5_0": "leaf1"}} for n in "acdefgk"})
    m = model("m", gpu_profile())
    fleet = Fleet({h.name: h for h in hosts}, {f.host: f for f in fs}, fabrics, inputs([m], hosts).ports)
    keys = [StaticKey(cls, sel, n_gpus, mem, multi, path)
            for cls, sel, n_gpus, mem, multi, path in product(
                (None, "H100-80GB", "A100-80GB"), ((), (("role", "x"),)), (0, 1, 4, 8), (0.0, 16.0), (False, True),
                (None, "/srv/models/m.gguf", "/etc/shadow"))]
    for key in keys:
        for node in fleet.nodes:
            assert static_ok(node, key) == (static_reason(node, key, 2) is None), (node.name, key)
    assert any(static_ok(n, k) for n in fleet.nodes for k in keys)
    assert not all(static_ok(n, k) for n in fleet.nodes for k in keys)


def test_fails_now_agrees_with_dynamic_fault_as_a_fleet_fills() -> None:
    """The spread indexes ask `fails_now`; it must answer as `dynamic_fault` does for GPUs,
    memory, disk (held, pending, shared) and ports, at every step of a filling fleet."""
    from llmgw.planner.placement import Need, dynamic_fault, fails_now

    gb = 1024**3
    held = Weights(path="/var/cache/llmgw/x", size_bytes=1, cache=True, cache_name=cache_name("hf://o/r/a.gguf"))
    hosts = [host(n) for n in "abcdef"]
    fs = [facts("a", 8, mem_gb=40, disk_free_gb=100), facts("b", 4, mem_gb=None, disk_free_gb=30),
          facts("c", 8, disk_free_gb=30, weights=[held]), facts("d", 8, disk_free_gb=50, shared_device="nfs1"),
          facts("e", 8, disk_free_gb=50, shared_device="nfs1"), facts("f", None)]
    ms = [model("a", gpu_profile(gpus=2, min_memory_gb=16), source="hf://o/r/a.gguf"),
          model("b", gpu_profile(gpus=1), source="hf://o/r/b.gguf"), model("c", cpu_profile(mem=8))]
    plan_in = inputs(ms, hosts, fs, sizes={"hf://o/r/a.gguf": 40 * gb, "hf://o/r/b.gguf": None},
                     ports=(20000, 20002))
    fleet = Fleet(plan_in.nodes, plan_in.facts, plan_in.fabrics, plan_in.ports)
    needs = [Need(m, m.profiles[0], cache_name(m.source), plan_in.weight_sizes.get(m.source)) for m in ms]
    checks = [(need, checked, fails_now(fleet, need, gpus_checked=checked))
              for need in needs for checked in (False, True)]
    seen: set[str | None] = set()
    for step in range(12):
        for need, checked, fails in checks:
            for n in fleet.nodes:
                fault = dynamic_fault(fleet, n, need, gpus_checked=checked)
                seen.add(fault)
                assert fails(n) == (fault is not None), (step, need.model.name, checked, n.name, fault)
        node = fleet.nodes[step % 5]
        free = node.free(None)[:1]
        port = node.free_port(fleet.ports)
        fleet.take(node, free, 12.0, port, ms[step % 2].source, needs[step % 2].cache_name, 40 * gb)
    assert {"gpus", "memory", "disk", "port", None} <= seen


def test_a_plan_leaves_no_reference_cycles() -> None:
    """The fleet's indexes hold closures that refer back to it; make_plan drops them (Fleet.release),
    so reference counting frees the whole fleet, not the cyclic collector (0.6 s at 4,096 hosts)."""
    import gc

    leaves = {n: {"ib0": {"mlx5_0": "leaf1", "mlx5_1": "leaf2"}} for n in "abcd"}
    ms = [model("two", gpu_profile(gpus=8, nodes=2)), model("one", gpu_profile(gpus=2), min=2)]
    plan_in = inputs(ms, [host(n) for n in "abcd"], [facts(n, 8) for n in "abcd"], fabrics=MapFabrics(leaves=leaves))
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        plan = make_plan(plan_in)
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
    assert len(placed_on(plan, "two")) == 1 and len(placed_on(plan, "one")) == 2


@pytest.mark.parametrize(("source", "dirs", "inside"), [
    ("file:///srv/models/m.gguf", ["/srv/models"], True),
    ("file:///srv/models/sub/m.gguf", ["/srv/models/"], True),
    ("file:///srv/models/a/../m.gguf", ["/srv/models"], True),
    ("file:///srv/models/../../etc/shadow", ["/srv/models"], False),
    ("file:///srv/models", ["/srv/models"], False),       # the folder itself is not a file in it
    ("file:///srv/modelsX/m.gguf", ["/srv/models"], False),
    ("file:///etc/shadow", ["/"], False),                  # `/` is never a model folder (nor on the host)
    ("file:///etc/shadow", [], False),
    ("file:///data/m.gguf", ["/srv/models", "/data"], True),
])
def test_a_file_source_must_lie_under_a_model_dir(source: str, dirs: list[str], inside: bool) -> None:
    from llmgw.planner.fleet import in_model_dirs, model_file

    path = model_file(source)
    assert path is not None and in_model_dirs(path, dirs) == inside
    m = model("m", gpu_profile())
    m = m.model_copy(update={"source": source})
    plan = make_plan(inputs([m], [host("n1", model_dirs=dirs)], [facts("n1", 8)]))
    assert [r.shards[0].node for r in plan.desired.replicas] == (["n1"] if inside else [])
    if not inside:
        [reason] = [r.reason for r in plan.unplaced[0].rejections]
        assert reason == (f"n1: file://{path} is outside its llmgw_model_dirs ({', '.join(dirs) or 'none set'}); "
                          "a file:// source must lie under one of them")
