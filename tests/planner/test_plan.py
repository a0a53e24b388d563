"""Reconciling the applied state: what stays, what moves, what goes, and drift."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from llmgw.planner import Plan, make_plan
from llmgw.planner.render import render_plan
from llmgw.state import Replica, Shard, State
from tests.support.plan_inputs import T0, catalog, cpu_profile, facts, gpu_profile, host, inputs, model


def applied(plan: Plan, state: State | None = None) -> State:
    return plan.applied(state or State(lineage="test"))


def actions(plan: Plan) -> list[tuple[str, str | None, str | None]]:
    return [(a.action, a.replica, a.replaces) for a in plan.actions]


M = model("m", gpu_profile(gpus=4), min=2)  # one replica fills one node
HOSTS = [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")]
FACTS = [facts("a", 4), facts("b", 4)]


def test_first_plan_creates_min_replicas_with_ids_units_ports_endpoints() -> None:
    plan = make_plan(inputs([M], HOSTS, FACTS))
    assert actions(plan) == [("create", "m-1", None), ("create", "m-2", None)]
    r = plan.desired.replicas[0]
    assert (r.id, r.endpoint, r.shards[0].unit, r.shards[0].port) == (
        "m-1", "http://10.0.0.1:20000", "llmgw-m-1-0.service", 20000)
    assert plan.summary.model_dump() == {"add": 2, "change": 0, "destroy": 0}


def test_applied_plan_replans_to_no_changes() -> None:
    plan = make_plan(inputs([M], HOSTS, FACTS))
    again = make_plan(inputs([M], HOSTS, FACTS, state=applied(plan)))
    assert not again.has_changes
    assert "No changes. The fleet matches the catalog." in render_plan(again, applied(plan))
    assert [r.status for r in again.desired.replicas] == ["kept", "kept"]


def test_draining_node_replicas_are_replaced_create_before_destroy() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    hosts = [host("a", "draining", address="10.0.0.1"), host("b", address="10.0.0.2"), host("c", address="10.0.0.3")]
    plan = make_plan(inputs([M], hosts, [*FACTS, facts("c", 4)], state=state))
    assert actions(plan) == [("replace", "m-3", "m-1")]
    assert plan.actions[0].reason == "node a is draining"
    assert plan.summary.model_dump() == {"add": 1, "change": 0, "destroy": 1}
    text = render_plan(plan, state)
    assert "-/+ replace (create the new one, then drain and destroy the old)" in text
    assert '-/+ replica "m-1" -> "m-3" {' in text
    assert "Plan: 1 to add, 0 to change, 1 to destroy." in text


def test_draining_without_room_keeps_the_replica_and_says_so() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    hosts = [host("a", "draining"), host("b")]
    plan = make_plan(inputs([M], hosts, FACTS, state=state))
    assert not plan.has_changes
    [u] = plan.unplaced
    assert [n.replica for n in u.not_moved] == ["m-1"]
    assert "it stays until a replacement fits" in u.not_moved[0].reason


def test_cordoned_node_keeps_its_replicas() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    plan = make_plan(inputs([M], [host("a", "cordoned", address="10.0.0.1"), HOSTS[1]], FACTS, state=state))
    assert not plan.has_changes


def test_gone_node_replica_is_replaced() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    plan = make_plan(inputs([M], [HOSTS[1], host("c")], [FACTS[1], facts("c", 4)], state=state))
    assert actions(plan) == [("replace", "m-3", "m-1")]
    assert plan.actions[0].reason == "node a is gone from the inventory"
    # Without room, a replica on a gone node is destroyed anyway: nothing runs there.
    plan = make_plan(inputs([M], [HOSTS[1]], [FACTS[1]], state=state))
    assert actions(plan) == [("destroy", "m-1", None)]
    assert plan.unplaced[0].not_moved[0].replica == "m-1"


def test_changed_definition_replaces() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    changed = model("m", gpu_profile(gpus=4, args=["--max-model-len", "8192"]), min=2)
    plan = make_plan(inputs([changed], [*HOSTS, host("c")], [*FACTS, facts("c", 4)], state=state))
    assert [a.action for a in plan.actions] == ["replace"]
    assert plan.unplaced[0].not_moved[0].replica == "m-2"  # no room for a second new one yet
    assert plan.actions[0].reason == "its definition changed (source or profile gpu)"


def test_scaling_up_adds_and_down_destroys_the_newest() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    up = make_plan(inputs([model("m", gpu_profile(gpus=4), min=3)], [*HOSTS, host("c")], [*FACTS, facts("c", 4)],
                          state=state))
    assert actions(up) == [("create", "m-3", None)]
    assert up.actions[0].reason == "scaling.min is 3 and 2 run"
    down = make_plan(inputs([model("m", gpu_profile(gpus=4), min=1)], HOSTS, FACTS, state=state))
    assert actions(down) == [("destroy", "m-2", None)]
    assert down.actions[0].reason == "scaling.max is 1"
    assert [u.unit for u in down.actions[0].units] == ["llmgw-m-2-0.service"]


def test_scaling_down_empties_cordoned_nodes_first() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    hosts = [HOSTS[0], host("b", "cordoned", address="10.0.0.2")]
    down = make_plan(inputs([model("m", gpu_profile(gpus=4), min=1)], hosts, FACTS, state=state))
    assert actions(down) == [("destroy", "m-2", None)]
    hosts = [host("a", "cordoned", address="10.0.0.1"), HOSTS[1]]
    down = make_plan(inputs([model("m", gpu_profile(gpus=4), min=1)], hosts, FACTS, state=state))
    assert actions(down) == [("destroy", "m-1", None)]


def test_unchanged_replicas_are_counted_not_shown() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    up = make_plan(inputs([model("m", gpu_profile(gpus=4), min=3)], [*HOSTS, host("c")], [*FACTS, facts("c", 4)],
                          state=state))
    assert "  # (2 unchanged replicas hidden)\n\nPlan: 1 to add, 0 to change, 0 to destroy." in render_plan(up, state)


def test_replicas_above_min_up_to_max_are_left_alone() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    plan = make_plan(inputs([model("m", gpu_profile(gpus=4), min=1, max=2)], HOSTS, FACTS, state=state))
    assert [a.action for a in plan.actions] == ["update"]  # scaling record only


def test_model_removed_from_catalog_is_destroyed() -> None:
    other = model("o", cpu_profile())
    state = applied(make_plan(inputs([M, other], HOSTS, FACTS)))
    plan = make_plan(inputs([other], HOSTS, FACTS, state=state))
    assert actions(plan) == [("destroy", "m-1", None), ("destroy", "m-2", None)]
    assert plan.actions[0].reason == "model m is no longer in the catalog"


def test_ports_are_stable_and_new_shards_take_the_lowest_free() -> None:
    one = model("m", cpu_profile(), min=3)
    state = applied(make_plan(inputs([one], [host("a")], [facts("a", 0)])))
    assert [r.shards[0].port for r in state.replicas] == [20000, 20001, 20002]
    fewer = State(lineage="test", replicas=[r for r in state.replicas if r.id != "m-2"])
    plan = make_plan(inputs([one], [host("a")], [facts("a", 0)], state=fewer))
    assert actions(plan) == [("create", "m-2", None)]
    assert {r.id: r.shards[0].port for r in plan.desired.replicas} == {"m-1": 20000, "m-2": 20001, "m-3": 20002}


def test_min_zero_is_on_demand_and_never_placed() -> None:
    od = model("od", cpu_profile(), min=0, max=2)
    plan = make_plan(inputs([od], HOSTS, FACTS))
    assert plan.desired.replicas == []
    assert [(o.model, o.max, o.running) for o in plan.on_demand] == [("od", 2, 0)]
    assert [(a.action, a.model) for a in plan.actions] == [("update", "od")]


def test_model_records_are_updates_the_routers_need() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    aliased = model("m", gpu_profile(gpus=4), min=2, aliases=["mm"])
    plan = make_plan(inputs([aliased], HOSTS, FACTS, state=state))
    assert actions(plan) == [("update", None, None)]
    assert plan.actions[0].reason == "aliases [] -> ['mm']"
    assert plan.summary.change == 1
    assert "~ update in-place" in render_plan(plan, state)


def test_interrupted_drain_is_finished() -> None:
    state = applied(make_plan(inputs([M], HOSTS, FACTS)))
    r = state.replicas[0].model_copy(update={"state": "draining"})
    state = state.model_copy(update={"replicas": [r, *state.replicas[1:]]})
    plan = make_plan(inputs([M], [*HOSTS, host("c")], [*FACTS, facts("c", 4)], state=state))
    assert actions(plan) == [("create", "m-3", None), ("destroy", "m-1", None)]
    assert plan.actions[1].reason == "it was being drained when the last apply stopped"


def _recorded(created: bool = True) -> State:
    records = make_plan(inputs([model("m", gpu_profile(gpus=2))], [], [])).desired.models
    return State(lineage="t", models=records, replicas=[Replica(
        id="m-1", model="m", profile="gpu", engine="vllm", state="ready", endpoint="http://a:20000",
        shards=[Shard(node="a", rank=0, gpus=[0, 1], port=20000, unit="llmgw-m-1-0.service")],
        created_at=T0 if created else None, spec_hash="")])


def test_drift_units_gone_are_recreated_and_strays_destroyed() -> None:
    one = model("m", gpu_profile(gpus=2))
    state = _recorded()
    spec = make_plan(inputs([one], [host("a")], [facts("a", 4)])).desired.replicas[0].spec_hash
    state = state.model_copy(update={"replicas": [state.replicas[0].model_copy(update={"spec_hash": spec})]})
    later = T0 + timedelta(hours=1)
    f = facts("a", 4, units=["llmgw-x-7-0.service", "llmgw-router.service", "sshd.service"], gathered_at=later)
    plan = make_plan(inputs([one], [host("a")], [f], state=state))
    assert actions(plan) == [("replace", "m-2", "m-1"), ("destroy", "x-7", None)]
    assert plan.actions[0].reason == "its units are gone from the hosts (llmgw-m-1-0.service on a)"
    assert plan.actions[1].stray and [u.unit for u in plan.actions[1].units] == ["llmgw-x-7-0.service"]
    # The dead replica's GPUs are free again: the replacement takes them.
    assert plan.desired.replicas[0].shards[0].gpus == [0, 1]


def test_no_drift_claim_without_fresh_facts() -> None:
    one = model("m", gpu_profile(gpus=2))
    base = _recorded()
    spec = make_plan(inputs([one], [host("a")], [facts("a", 4)])).desired.replicas[0].spec_hash
    state = base.model_copy(update={"replicas": [base.replicas[0].model_copy(update={"spec_hash": spec})]})
    for f in (facts("a", 4, units=None), facts("a", 4, units=[], gathered_at=T0 - timedelta(hours=1)),
              facts("a", 4, units=[], gathered_at=T0 + timedelta(hours=1), stale=True)):
        assert not make_plan(inputs([one], [host("a")], [f], state=state)).has_changes


def test_new_ids_skip_stray_ids() -> None:
    one = model("m", cpu_profile())
    f = facts("a", 0, units=["llmgw-m-1-0.service"])
    plan = make_plan(inputs([one], [host("a")], [f], state=State(serial=1, lineage="ours")))
    assert [r.id for r in plan.desired.replicas] == ["m-2"]


def test_same_inputs_same_bytes() -> None:
    ms = [M, model("c", cpu_profile(mem=4), min=2), model("od", cpu_profile(), min=0)]
    a = make_plan(inputs(ms, HOSTS, FACTS)).to_json()
    b = make_plan(inputs(list(reversed(ms)), list(reversed(HOSTS)), list(reversed(FACTS)))).to_json()
    assert a == b


def test_catalog_helper_orders_by_name() -> None:
    assert [m.name for m in catalog(model("b", cpu_profile()), model("a", cpu_profile()))] == ["a", "b"]


def test_unservable_gguf_skips_llamacpp_profiles_with_the_reason() -> None:
    m = model("m", cpu_profile(), gpu_profile(gpus=1), source="hf://org/m/m.gguf")
    plan = make_plan(replace(inputs([m], HOSTS, FACTS), unservable={"hf://org/m/m.gguf": ["arch x"]}))
    # the llama.cpp profile is never tried; the vLLM profile still places it
    assert [r.profile for r in plan.desired.replicas] == ["gpu"]
    only_cpu = model("m", cpu_profile(), source="hf://org/m/m.gguf")
    plan = make_plan(replace(inputs([only_cpu], HOSTS, FACTS), unservable={"hf://org/m/m.gguf": ["bad arch"]}))
    assert plan.desired.replicas == []
    (entry,) = plan.unplaced
    assert [(r.profile, r.node, r.reason) for r in entry.rejections] == [("cpu", None, "not servable: bad arch")]
