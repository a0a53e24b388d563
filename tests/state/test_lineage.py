"""Foreign units are never drift: a plan destroys only units of its own state's lineage, and
refuses to plan from an empty state while hosts run llmgw units."""

from __future__ import annotations

import pytest

from llmgw.errors import PlanError
from llmgw.facts.records import HostFacts, Unit
from llmgw.planner import make_plan
from llmgw.state import State
from tests.support.plan_inputs import cpu_profile, facts, host, inputs, model

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
