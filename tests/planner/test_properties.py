"""Property tests over random fleets and catalogs, checked by an independent referee.

No GPU given twice, no port twice on a node, every new shard fits every filter,
multi-node shards share a fabric, the same inputs give the same bytes in any input
order, and applying a plan then planning again gives `No changes.`
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw.catalog import Model
from llmgw.facts.records import HostFacts
from llmgw.inventory import Host
from llmgw.planner import MapFabrics, Plan, PlanInputs, make_plan
from llmgw.planner.fleet import BYTES_PER_GB
from llmgw.planner.render import NO_CHANGES, render_plan
from llmgw.state import State
from tests.support.plan_inputs import catalog, facts, gpus, host, model

CLASSES = ["H100-80GB", "A100-80GB"]
LABELS = [{}, {"role": "a"}, {"role": "b"}]


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Host], list[HostFacts], MapFabrics]:
    n = draw(st.integers(1, 10))
    hosts, fs = [], []
    leaves: dict[str, dict[str, dict[str, str]]] = {}
    degraded: set[tuple[str, str]] = set()
    for i in range(n):
        name = f"n{i:02d}"
        state = draw(st.sampled_from(["ready", "ready", "ready", "cordoned", "draining"]))
        hosts.append(host(name, state, draw(st.sampled_from(LABELS))))
        if draw(st.integers(0, 9)) == 0:
            continue  # no facts at all
        count = draw(st.sampled_from([None, 0, 1, 2, 4, 8, 8]))
        cls = draw(st.sampled_from(CLASSES))
        sick = {j: "ECC" for j in draw(st.sets(st.integers(0, 7), max_size=2))} if count else {}
        fs.append(facts(name, gpu_list=None if count is None else gpus(count, cls, sick), n_gpus=count,
                        mem_gb=draw(st.sampled_from([None, 8, 64, 512])),
                        disk_free_gb=draw(st.sampled_from([None, 20, 200])),
                        shared_device=draw(st.sampled_from([None, None, "filer:/x"]))))
        fabric = draw(st.sampled_from([None, "ib-a", "ib-b"]))
        if fabric:
            leaves[name] = {fabric: {"mlx5_0": draw(st.sampled_from(["l1", "l2"]))}}
            if draw(st.integers(0, 4)) == 0:
                degraded.add((name, fabric))
    return hosts, fs, MapFabrics(leaves, frozenset(degraded))


@st.composite
def profiles(draw: st.DrawFn, i: int) -> dict[str, Any]:
    g = draw(st.sampled_from([0, 1, 2, 4, 8]))
    p: dict[str, Any] = {"name": f"p{i}", "engine": "vllm" if g else "llamacpp", "gpus": g,
                         "min_memory_gb": draw(st.sampled_from([0, 4, 32]))}
    if g:
        p["nodes"] = draw(st.sampled_from([1, 1, 2, 3]))
        if draw(st.booleans()):
            p["gpu_class"] = draw(st.sampled_from(CLASSES))
    if draw(st.integers(0, 3)) == 0:
        p["node_selector"] = {"role": draw(st.sampled_from(["a", "b"]))}
    return p


@st.composite
def catalogs(draw: st.DrawFn) -> tuple[list[Model], dict[str, int | None]]:
    models, sizes = [], {}
    for i in range(draw(st.integers(1, 5))):
        ps = [draw(profiles(j)) for j in range(draw(st.integers(1, 3)))]
        lo = draw(st.integers(0, 3))
        m = model(f"m{i}", *ps, min=lo, max=lo + draw(st.integers(0, 1)))
        models.append(m)
        sizes[m.source] = draw(st.sampled_from([None, 10 * BYTES_PER_GB, 150 * BYTES_PER_GB]))
    return models, sizes


def make_inputs(fleet: tuple[list[Host], list[HostFacts], MapFabrics], cat: tuple[list[Model], dict[str, int | None]],
                **kw: Any) -> PlanInputs:
    hosts, fs, fab = fleet
    models, sizes = cat
    kw.setdefault("state", State(lineage="prop"))
    return PlanInputs(catalog=catalog(*models), nodes={h.name: h for h in hosts}, facts={f.host: f for f in fs},
                      fabrics=fab, weight_sizes=sizes, **kw)


def referee(inp: PlanInputs, plan: Plan) -> None:
    """Check the plan against the inputs without the planner's own code."""
    gpus_used: set[tuple[str, int]] = set()
    ports_used: set[tuple[str, int]] = set()
    mem: dict[str, float] = {}
    disk: dict[str, set[str]] = {}
    for r in plan.desired.replicas:
        m = inp.catalog.models[r.model]
        p = next(p for p in m.profiles if p.name == r.profile)
        assert len(r.shards) == p.nodes
        assert len({s.node for s in r.shards}) == p.nodes, "a multi-node replica uses distinct nodes"
        if p.nodes > 1:
            assert r.fabric is not None
            for s in r.shards:
                assert r.fabric in inp.fabrics.fabrics_of(s.node), "multi-node shards share a fabric"
        for s in r.shards:
            for g in s.gpus:
                assert (s.node, g) not in gpus_used, f"GPU {g} on {s.node} given twice"
                gpus_used.add((s.node, g))
            assert (s.node, s.port) not in ports_used
            ports_used.add((s.node, s.port))
            mem[s.node] = mem.get(s.node, 0) + p.min_memory_gb
            h, f = inp.nodes[s.node], inp.facts.get(s.node)
            if r.status != "new":
                continue
            assert h.node_state == "ready"
            assert all(h.labels.get(k) == v for k, v in p.node_selector.items())
            assert len(s.gpus) == p.gpus
            if p.gpus:
                assert f is not None and f.gpus is not None
                by_index = {g.index: g for g in f.gpus}
                for g in s.gpus:
                    assert by_index[g].healthy
                    assert p.gpu_class is None or by_index[g].gpu_class == p.gpu_class
            size = inp.weight_sizes.get(m.source)
            if f is not None and f.filesystems and size is not None:
                fs = f.filesystems[0]
                key = f"shared:{fs.device}" if fs.shared else f"{s.node}:{fs.mount}"
                disk.setdefault(key, set()).add(m.source)
                total = sum(inp.weight_sizes.get(src) or 0 for src in disk[key])
                assert total <= fs.free_bytes, f"{key} over-committed"
    for node, need in mem.items():
        f = inp.facts.get(node)
        if f is not None and f.memory_total_mb is not None:
            assert need * 1024 <= f.memory_total_mb, f"{node} memory over-committed"


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), catalogs())
def test_every_plan_passes_the_referee(fleet: Any, cat: Any) -> None:
    inp = make_inputs(fleet, cat)
    referee(inp, make_plan(inp))


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), catalogs(), st.randoms(use_true_random=False))
def test_same_inputs_in_any_order_give_the_same_bytes(fleet: Any, cat: Any, rnd: random.Random) -> None:
    hosts, fs, fab = fleet
    models, sizes = cat
    first = make_plan(make_inputs(fleet, cat)).to_json()
    shuffled = (rnd.sample(hosts, len(hosts)), rnd.sample(fs, len(fs)), fab)
    again = make_plan(make_inputs(shuffled, (rnd.sample(models, len(models)), sizes))).to_json()
    assert first == again


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), catalogs())
def test_applied_plan_replans_to_no_changes(fleet: Any, cat: Any) -> None:
    inp = make_inputs(fleet, cat)
    plan = make_plan(inp)
    state = plan.applied(inp.state)
    replan = make_plan(make_inputs(fleet, cat, state=state))
    assert not replan.has_changes, [a.model_dump() for a in replan.actions]
    assert NO_CHANGES in render_plan(replan, state)
    referee(make_inputs(fleet, cat, state=state), replan)
