"""The plans demand runs apply (llmgw.apply.on_demand_plans), made by the real planner on
in-memory hosts: a scale up starts every replica the load needs in one plan, as many as fit."""

from __future__ import annotations

import dataclasses

import pytest

from llmgw.apply.on_demand_plans import activation_plan
from llmgw.errors import PlanError
from llmgw.planner import PlanInputs
from llmgw.state import Replica, Shard, State
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model


def fleet(max_: int = 5, gpus: int = 3) -> PlanInputs:
    """Three hosts of one GPU each; `m` takes a whole GPU per replica."""
    names = ["a", "b", "c"][:gpus]
    return inputs([model("m", gpu_profile(gpus=1), min=0, max=max_)], [host(n) for n in names],
                  [facts(n, 1) for n in names])


def test_a_scale_up_plans_the_count_it_is_asked_for_in_one_plan() -> None:
    plan = activation_plan(fleet(), "m", more=True, count=2, code="demand", reason="7 in flight")
    assert plan is not None
    assert [(a.action, a.code, a.reason) for a in plan.actions] == [("create", "demand", "7 in flight")] * 2
    assert plan.summary.add == 2 and plan.unplaced == []
    assert sorted(r.id for r in plan.desired.replicas) == sorted(a.replica for a in plan.actions)
    assert len({r.shards[0].node for r in plan.desired.replicas}) == 2  # one GPU each: two hosts


def test_a_scale_up_places_what_fits_and_says_why_not_the_rest() -> None:
    plan = activation_plan(fleet(), "m", more=True, count=5)
    assert plan is not None and plan.summary.add == 3 and len(plan.desired.replicas) == 3
    (short,) = plan.unplaced
    assert short.model == "m" and any("GPUs free" in r.reason for r in short.rejections)


def test_an_activation_is_one_replica_and_max_caps_a_scale_up() -> None:
    one = activation_plan(fleet(), "m", count=3)  # not `more`: an activation starts one
    assert one is not None and one.summary.add == 1
    capped = activation_plan(fleet(max_=2), "m", more=True, count=3)
    assert capped is not None and capped.summary.add == 2 and capped.unplaced == []


def test_nothing_is_planned_past_max_or_when_nothing_fits() -> None:
    at_max = fleet(max_=1)
    rec = Replica(id="m-9", model="m", profile="gpu", engine="vllm", state="ready", endpoint="http://a:20000",
                  shards=[Shard(node="a", rank=0, gpus=[0], port=20000, unit="llmgw-m-9-0.service")])
    full = dataclasses.replace(at_max, state=State(lineage="test", replicas=[rec]))
    with pytest.raises(PlanError, match=r"already runs 1 replicas, its scaling\.max"):
        activation_plan(full, "m", more=True, count=2)
    with pytest.raises(PlanError, match="no node can take a replica of m") as none:
        activation_plan(fleet(gpus=0), "m", more=True, count=2)
    assert none.value.hint and "llmgw explain m" in none.value.hint
    with pytest.raises(PlanError, match="not a model in the catalog"):
        activation_plan(fleet(), "nosuch")
