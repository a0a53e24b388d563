"""Foreign units are never drift: a plan destroys only units of its own state's lineage, and
refuses to plan from an empty state while hosts run llmgw units."""

from __future__ import annotations

import pytest

from llmgw.errors import PlanError
from llmgw.facts.records import HostFacts, Unit
from llmgw.planner import make_plan
from llmgw.state import State
from tests.support.plan_inputs import cpu_profile, facts, gpu_profile, host, inputs, model

OURS = "lineage-ours"
THEIRS = "lineage-theirs"


def with_units(name: str, *units: tuple[str, str | None]) -> HostFacts:
    base = facts(name, 0)
    return base.model_copy(update={"units": [Unit(name=u, active_state="active", lineage=lin) for u, lin in units]})


def test_units_of_another_lineage_are_left_alone_and_named() -> None:
    m = model("m", cpu_profile())
    first = make_plan(inputs([m], [host("a")], [with_units("a")]))
    state = first.applied(State(serial=3, lineage=OURS))
    f = with_units("a", *((s.unit, OURS) for r in state.replicas for s in r.shards),
                   ("llmgw-m-9-0.service", THEIRS),
                   ("llmgw-x-3-0.service", OURS))
    plan = make_plan(inputs([m], [host("a")], [f], state=state))
    assert [r.id for r in state.replicas] == ["m-1"]
    destroyed = [(a.replica, a.stray) for a in plan.actions if a.action == "destroy"]
    assert destroyed == [("x-3", True)]  # our own unrecorded unit is drift; theirs is not
    assert any(THEIRS in n and "left alone" in n for n in plan.notes)


def test_an_empty_state_with_llmgw_units_running_is_refused_naming_their_lineage() -> None:
    m = model("m", cpu_profile())
    f = with_units("a", ("llmgw-m-1-0.service", THEIRS), ("sshd.service", None))
    with pytest.raises(PlanError) as refused:
        make_plan(inputs([m], [host("a")], [f], state=State(lineage="")))
    err = refused.value
    assert THEIRS in err.message and "llmgw-m-1-0.service on a" in "\n".join(err.detail)
    assert err.hint is not None and "state:" in err.hint and "llmgw state import" in err.hint
    # With the state that made them, the same hosts plan no destruction.
    mine = make_plan(inputs([m], [host("a")], [with_units("a")]))
    state = mine.applied(State(serial=1, lineage=THEIRS))
    f = with_units("a", *((s.unit, THEIRS) for r in state.replicas for s in r.shards))
    assert not make_plan(inputs([m], [host("a")], [f], state=state)).has_changes


def test_no_units_running_an_empty_state_plans_as_before() -> None:
    plan = make_plan(inputs([model("m", cpu_profile())], [host("a")], [with_units("a", ("sshd.service", None))],
                            state=State(lineage="")))
    assert [a.action for a in plan.actions] == ["create"]


def foreign_on(name: str, n_gpus: int, gpus: list[int] | None, memory_mb: int | None,
               mem_gb: float = 1024) -> HostFacts:
    base = facts(name, n_gpus, mem_gb=mem_gb)
    return base.model_copy(update={"units": [Unit(name="llmgw-x-1-0.service", active_state="active", lineage=THEIRS,
                                                  gpus=gpus, memory_mb=memory_mb)]})


def test_the_gpus_of_another_lineages_unit_are_reserved_and_named_when_nothing_fits() -> None:
    m = model("m", gpu_profile(gpus=1))
    state = State(serial=1, lineage=OURS)
    plan = make_plan(inputs([m], [host("a")], [foreign_on("a", 2, [0], None)], state=state))
    assert [s.gpus for r in plan.desired.replicas for s in r.shards] == [[1]]  # not GPU 0: theirs
    assert any(THEIRS in n and "GPU 0 kept free" in n for n in plan.notes), plan.notes

    full = make_plan(inputs([m], [host("a")], [foreign_on("a", 2, [0, 1], None)], state=state))
    assert not full.desired.replicas and [u.model for u in full.unplaced] == ["m"]
    reasons = [r.reason for u in full.unplaced for r in u.rejections]
    assert reasons and all("0 of 2" in r and "llmgw-x-1-0.service" in r and THEIRS in r and "GPUs 0, 1" in r
                           for r in reasons), reasons


def test_the_memory_another_lineages_unit_uses_is_reserved() -> None:
    m = model("m", cpu_profile(mem=8))
    state = State(serial=1, lineage=OURS)
    fits = make_plan(inputs([m], [host("a")], [foreign_on("a", 0, None, 4 * 1024, mem_gb=16)], state=state))
    assert len(fits.desired.replicas) == 1
    full = make_plan(inputs([m], [host("a")], [foreign_on("a", 0, None, 10 * 1024, mem_gb=16)], state=state))
    assert not full.desired.replicas
    reasons = [r.reason for u in full.unplaced for r in u.rejections]
    assert reasons and all("6 of 16 GB" in r and "10 GB of memory" in r and THEIRS in r for r in reasons), reasons
    # Our own units are ours to account: only another lineage's are reserved from facts.
    ours = foreign_on("a", 0, None, 10 * 1024, mem_gb=16)
    ours = ours.model_copy(update={"units": [u.model_copy(update={"lineage": OURS}) for u in ours.units or []]})
    assert sorted(a.action for a in make_plan(inputs([m], [host("a")], [ours], state=state)).actions) == [
        "create", "destroy"]  # the stray is destroyed; m fits in the memory it leaves
