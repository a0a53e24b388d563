"""LoRA adapters in plans (docs/adapters.md): a new replica carries the adapters its profile
loads, applied replicas record them, and a change to them replaces the replicas."""

from __future__ import annotations

from llmgw.planner import make_plan
from llmgw.planner.render import render_plan
from llmgw.planner.spec import spec_hash
from llmgw.state import LoadedAdapter, State
from llmgw.weights.names import cache_name
from tests.support.plan_inputs import cpu_profile, facts, gpu_profile, host, inputs, model

SQL = "hf://org/tiny-sql/tiny-sql.gguf"
POET = "hf://org/tiny-poet/tiny-poet.gguf"
ADAPTERS = [{"name": "tiny-sql", "aliases": ["sql"], "source": SQL, "profiles": ["cpu"]},
            {"name": "tiny-poet", "source": POET, "scale": 0.5}]
HOSTS = [host("a", address="10.0.0.1")]
FACTS = [facts("a", 0)]


def test_a_new_replica_loads_its_profiles_adapters_and_the_state_records_them() -> None:
    m = model("tiny", cpu_profile(), adapters=ADAPTERS)
    plan = make_plan(inputs([m], HOSTS, FACTS))
    r = plan.desired.replicas[0]
    assert [(a.name, a.source, a.cache_name) for a in r.adapters or []] == [
        ("tiny-sql", SQL, cache_name(SQL)), ("tiny-poet", POET, cache_name(POET))]
    record = next(x for x in plan.desired.models if x.name == "tiny")
    assert [(a.name, a.aliases, a.scale_percent) for a in record.adapters] == [
        ("tiny-sql", ["sql"], 100), ("tiny-poet", [], 50)]
    state = plan.applied(State(lineage="t"))
    assert state.replicas[0].adapters == [LoadedAdapter(name="tiny-sql", cache_name=cache_name(SQL)),
                                          LoadedAdapter(name="tiny-poet", cache_name=cache_name(POET))]
    assert not make_plan(inputs([m], HOSTS, FACTS, state=state)).has_changes


def test_only_the_profiles_an_adapter_names_load_it() -> None:
    m = model("tiny", gpu_profile(), cpu_profile(), adapters=ADAPTERS)
    gpu = make_plan(inputs([m], [host("g", address="10.0.0.2")], [facts("g", 1)])).desired.replicas[0]
    assert gpu.profile == "gpu" and [a.name for a in gpu.adapters or []] == ["tiny-poet"]


def test_adding_an_adapter_replaces_the_replicas_and_a_model_without_keeps_its_hash() -> None:
    bare = model("tiny", cpu_profile())
    state = make_plan(inputs([bare], HOSTS, FACTS)).applied(State(lineage="t"))
    with_adapters = model("tiny", cpu_profile(), adapters=ADAPTERS)
    plan = make_plan(inputs([with_adapters], HOSTS, FACTS, state=state))
    assert [(a.action, a.replica, a.replaces, a.code) for a in plan.actions if a.replica] == [
        ("replace", "tiny-2", "tiny-1", "definition_changed")]
    assert '      adapters = "" -> "tiny-sql, tiny-poet"' in render_plan(plan, state).splitlines()
    assert spec_hash(bare, bare.profiles[0]) != spec_hash(with_adapters, with_adapters.profiles[0])
    # A scale is the router's alone: the engine loads the same files, nothing is replaced.
    rescaled = model("tiny", cpu_profile(), adapters=[{**ADAPTERS[0]}, {**ADAPTERS[1], "scale": 0.8}])
    assert spec_hash(rescaled, rescaled.profiles[0]) == spec_hash(with_adapters, with_adapters.profiles[0])


def test_loading_at_run_time_records_where_each_adapter_is_and_how_many_a_replica_holds() -> None:
    """adapter_loading: runtime: the plan and the state carry each adapter's path on rank 0's host
    (the router's load call names it) and max_loras (the model's record, the engine's slots)."""
    g, gf = [host("g", address="10.0.0.2")], [facts("g", 2)]  # room for a replacement beside the replica
    m = model("tiny", gpu_profile(), adapters=ADAPTERS[1:], adapter_loading="runtime", max_loras=2)
    plan = make_plan(inputs([m], g, gf))
    r = plan.desired.replicas[0]
    assert r.max_loras == 2
    assert [(a.name, a.path) for a in r.adapters or []] == [("tiny-poet", f"/var/cache/llmgw/{cache_name(POET)}")]
    record = next(x for x in plan.desired.models if x.name == "tiny")
    assert record.max_loras == 2
    state = plan.applied(State(lineage="t"))
    assert state.replicas[0].adapters == [LoadedAdapter(name="tiny-poet", cache_name=cache_name(POET),
                                                        path=f"/var/cache/llmgw/{cache_name(POET)}")]
    assert not make_plan(inputs([m], g, gf, state=state)).has_changes
    # Loading at start instead, or another max_loras, runs the engine differently: replaced.
    at_start = model("tiny", gpu_profile(), adapters=ADAPTERS[1:])
    assert spec_hash(at_start, at_start.profiles[0]) != spec_hash(m, m.profiles[0])
    more = model("tiny", gpu_profile(), adapters=ADAPTERS[1:], adapter_loading="runtime", max_loras=3)
    assert spec_hash(more, more.profiles[0]) != spec_hash(m, m.profiles[0])
    replan = make_plan(inputs([more], g, gf, state=state))
    assert [(a.action, a.code) for a in replan.actions if a.replica] == [("replace", "definition_changed")]
    # Loaded at start: no max_loras, no paths (the engine has them on its command line).
    start = make_plan(inputs([at_start], g, gf)).desired.replicas[0]
    assert start.max_loras is None and all(a.path is None for a in start.adapters or [])
