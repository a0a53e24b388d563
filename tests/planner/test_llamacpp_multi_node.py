"""llama.cpp multi-node replicas meet over TCP (rank 0 reaches its rpc-server workers on
their management addresses): no InfiniBand fabric needed, CPU hosts allowed. vLLM and
SGLang multi-node profiles still need GPUs and a fabric."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.catalog import Profile
from llmgw.planner import make_plan
from tests.support.plan_inputs import cpu_profile, facts, gpu_profile, host, inputs, model


def test_a_cpu_llamacpp_profile_may_span_nodes_but_not_a_vllm_one() -> None:
    assert Profile(name="p", engine="llamacpp", nodes=2).nodes == 2
    with pytest.raises(ValidationError, match="multi-node profile needs gpus"):
        Profile(name="p", engine="vllm", nodes=2)


def test_two_cpu_nodes_without_a_fabric_take_one_replica_each_rank_on_its_own_node() -> None:
    m = model("m", cpu_profile(nodes=2))
    plan = make_plan(inputs([m], [host("a"), host("b"), host("c")], [facts(n, 0) for n in "abc"]))
    [replica] = plan.desired.replicas
    assert [(s.rank, s.node) for s in replica.shards] == [(0, "a"), (1, "b")]
    assert replica.fabric is None and replica.endpoint.endswith(f":{replica.shards[0].port}")


def test_too_few_nodes_is_a_reason_naming_the_count() -> None:
    m = model("m", cpu_profile(nodes=3, mem=2))
    plan = make_plan(inputs([m], [host("a"), host("b"), host("c", "cordoned")],
                            [facts("a", 0), facts("b", 0), facts("c", 0)]))
    [unplaced] = plan.unplaced
    assert [r.reason for r in unplaced.rejections] == ["c: cordoned",
                                                       "2 nodes can take a shard, a 3-node replica needs 3"]


def test_vllm_multi_node_still_needs_a_fabric() -> None:
    m = model("m", gpu_profile(gpus=8, nodes=2, engine="vllm"))
    plan = make_plan(inputs([m], [host("a"), host("b")], [facts("a", 8), facts("b", 8)]))
    assert plan.desired.replicas == []
