"""Spread for availability: a model's replicas on different hosts, then different failure
domains (`llmgw_failure_domain`, catalog `spread:` labels, leaf switches), weights only
breaking ties; replacements during a drain never beside their sibling when another fits."""

from __future__ import annotations

from typing import Any

from llmgw.facts.records import Weights
from llmgw.inventory import Host
from llmgw.planner import Plan, make_plan
from llmgw.planner.explain import explain, explanation_json, render_explanation
from llmgw.state import State
from llmgw.weights.names import cache_name
from tests.support.plan_inputs import cpu_profile, facts, gpu_profile, inputs, model

TINY = model("tiny", cpu_profile(mem=1), min=2, max=2, source="file:///srv/models/tiny.gguf")


def node(name: str, state: str = "ready", *, domain: str | None = None, **labels: str) -> Host:
    hv: dict[str, Any] = {} if domain is None else {"llmgw_failure_domain": domain}
    return Host(name=name, groups=frozenset({"llmgw_nodes"}), node_state=state,  # type: ignore[arg-type]
                labels=dict(labels), model_dirs=["/srv/models"], mgmt_address=name, vars=hv)


def holding(name: str, source: str, n_gpus: int | None = 0) -> Any:
    held = Weights(path=f"/var/cache/llmgw/{cache_name(source)}", size_bytes=1, cache=True,
                   cache_name=cache_name(source))
    return facts(name, n_gpus, weights=[held])


def hosts_of(plan: Plan, name: str) -> list[str]:
    return [r.shards[0].node for r in plan.desired.replicas if r.model == name]


def test_two_replicas_on_two_hosts_though_one_holds_the_weights() -> None:
    fs = [facts("node1", 0), holding("node2", TINY.source), facts("node3", 0)]
    plan = make_plan(inputs([TINY], [node("node1"), node("node2"), node("node3")], fs))
    # node2 holds the weights: it gets the first; the second goes apart, to the first other by name.
    assert hosts_of(plan, "tiny") == ["node2", "node1"]


def test_a_drain_moves_each_replica_away_from_its_sibling() -> None:
    fs = [facts(n, 0) for n in ("node1", "node2", "node3")]
    ready = [node("node1"), node("node2"), node("node3")]
    state = make_plan(inputs([TINY], ready, fs)).applied(State(lineage="t"))
    assert sorted(s.node for r in state.replicas for s in r.shards) == ["node1", "node2"]
    for drained in ("node1", "node2", "node3", "node1"):
        hosts = [node(n, "draining" if n == drained else "ready") for n in ("node1", "node2", "node3")]
        plan = make_plan(inputs([TINY], hosts, fs, state=state))
        state = plan.applied(state)
        where = sorted(s.node for r in state.replicas for s in r.shards)
        assert drained not in where and len(set(where)) == 2, (drained, where)


def test_failure_domains_then_labels_then_weights() -> None:
    gpu = model("m", gpu_profile(gpus=1), min=2, spread=["rack"])
    hosts = [node("a1", domain="east", rack="r1"), node("a2", domain="east", rack="r2"),
             node("b1", domain="west", rack="r1"), node("b2", domain="west", rack="r2")]
    # a2 holds the weights, a1 too: with the first replica on a1, a2 is in the same domain.
    fs = [holding("a1", gpu.source, 8), holding("a2", gpu.source, 8), facts("b1", 8), facts("b2", 8)]
    plan = make_plan(inputs([gpu], hosts, fs))
    assert hosts_of(plan, "m") == ["a1", "b2"]  # another domain, and then another rack
    three = model("m", gpu_profile(gpus=1), min=3, spread=["rack"])
    plan = make_plan(inputs([three], hosts, fs))
    # The third: every domain has one; the rack without one (r1 has a1, r2 has b2) ... all
    # racks too, so the least crowded by host, and a2 holds the weights: a tie broken by them.
    assert hosts_of(plan, "m") == ["a1", "b2", "a2"]


def test_no_other_host_fits_both_share_one_and_explain_says_why() -> None:
    fs = [facts("node1", 0, mem_gb=8), facts("node2", 0, mem_gb=0.5)]
    inp = inputs([TINY], [node("node1"), node("node2")], fs)
    assert hosts_of(make_plan(inp), "tiny") == ["node1", "node1"]
    e = explain(inp, "tiny")
    text = render_explanation(e)
    assert "Spread: 2 replicas on 1 host (node1)" in text
    assert "node2: has 0.5 GB of memory, needs 1" in text
    js = explanation_json(e)["spread"]
    assert js["hosts"] == ["node1"] and js["not_further"][0]["node"] == "node2"


def test_explain_says_how_a_model_is_spread() -> None:
    hosts = [node("a1", domain="east"), node("b1", domain="west"), node("c1", domain="west")]
    inp = inputs([TINY], hosts, [facts(h.name, 0) for h in hosts])
    text = render_explanation(explain(inp, "tiny"))
    assert "Spread: 2 replicas on 2 hosts (a1, b1), 2 failure domains (east, west)." in text


def test_the_plan_says_when_capacity_cannot_keep_the_floor() -> None:
    fs = [facts("node1", 0, mem_gb=1.5), facts("node2", 0), facts("node3", 0, mem_gb=0.5)]
    hosts = [node("node1"), node("node2"), node("node3")]
    state = make_plan(inputs([TINY], hosts, fs)).applied(State(lineage="t"))
    assert sorted(s.node for r in state.replicas for s in r.shards) == ["node1", "node2"]
    # node2 leaves the inventory: node1 has room for one replica only (it runs it), node3 for none.
    plan = make_plan(inputs([TINY], hosts[::2], fs[::2], state=state))
    assert ("tiny: capacity cannot keep the floor: 2 ready replicas now, 1 after this apply, scaling.min 2"
            in "\n".join(plan.notes))
    # A drain whose replacement fits nowhere keeps the replica: the floor holds, no such note.
    drain = make_plan(inputs([TINY], [hosts[0], node("node2", "draining"), hosts[2]], fs, state=state))
    assert not any("floor" in n for n in drain.notes)
    assert [a.action for a in drain.actions if a.model == "tiny"] == []


def test_a_failure_domain_must_be_a_name() -> None:
    from pathlib import Path

    import pytest

    from llmgw.errors import InventoryError
    from llmgw.inventory import parse_inventory_json

    def inv(value: object) -> Any:
        return parse_inventory_json(Path("hosts.yml"), {
            "_meta": {"hostvars": {"n1": {"llmgw_failure_domain": value}}}, "llmgw_nodes": {"hosts": ["n1"]}})

    assert inv("room-a").hosts["n1"].vars["llmgw_failure_domain"] == "room-a"
    for bad in ({"a": 1}, ["x"], True):
        with pytest.raises(InventoryError, match=r"llmgw_failure_domain is .*expected a name"):
            inv(bad)
