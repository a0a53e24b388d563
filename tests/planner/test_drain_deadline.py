"""A drain with a deadline: the plan keeps a replica nothing can take until the deadline, says
until when, and the first plan after it destroys the replica saying how far below min its
model falls. The clock is an input: every time here is pinned."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from llmgw.planner import Plan, PlanInputs, make_plan
from llmgw.planner.explain import explain, render_explanation
from llmgw.planner.render import render_plan
from llmgw.state import State
from tests.support.plan_inputs import T0, facts, gpu_profile, host, inputs, model

M = model("m", gpu_profile(gpus=4), min=2)  # one replica fills one node
DEADLINE = T0 + timedelta(hours=1)
FACTS = [facts("a", 4), facts("b", 4)]


def _state() -> State:
    first = make_plan(inputs([M], [host("a"), host("b")], FACTS))
    return first.applied(State(lineage="test"))


def _at(now_offset: timedelta | None, deadline: bool = True) -> PlanInputs:
    a = replace(host("a", "draining"), drain_deadline=DEADLINE if deadline else None)
    base = inputs([M], [a, host("b")], FACTS, state=_state())
    return replace(base, now=None if now_offset is None else DEADLINE + now_offset)


def _destroys(plan: Plan) -> list[tuple[str | None, str, str]]:
    return [(a.replica, a.code, a.reason) for a in plan.actions if a.action == "destroy"]


def test_before_the_deadline_the_replica_stays_and_the_plan_says_until_when() -> None:
    plan = make_plan(_at(-timedelta(seconds=1)))
    assert not plan.has_changes
    [u] = plan.unplaced
    [nm] = u.not_moved
    assert (nm.replica, nm.code, nm.reason) == (
        "m-1", "node_draining",
        "node a is draining; it stays until a replacement fits, at most until the drain deadline "
        "2025-01-01T01:00:00Z; the first plan after it destroys the replica")


def test_at_the_deadline_the_replica_is_destroyed_saying_how_far_below_min() -> None:
    plan = make_plan(_at(timedelta(0)))
    assert _destroys(plan) == [(
        "m-1", "drain_deadline",
        "node a is draining and its drain deadline 2025-01-01T01:00:00Z has passed; no node can take a "
        "replacement: m falls to 1 of scaling.min 2 replicas, 1 below min")]
    assert plan.summary.model_dump() == {"add": 0, "change": 0, "destroy": 1}
    assert [r.id for r in plan.desired.replicas] == ["m-2"]
    [u] = plan.unplaced
    assert (u.wanted, u.placed) == (2, 1)
    assert u.not_moved[0].reason == "node a is draining; destroyed: its drain deadline 2025-01-01T01:00:00Z has passed"
    assert ("m: capacity cannot keep the floor: 2 ready replicas now, 1 after this apply, scaling.min 2 "
            "(see the models that cannot be placed)") in plan.notes
    assert "drain deadline 2025-01-01T01:00:00Z has passed" in render_plan(plan, _state())


def test_a_replica_above_min_past_the_deadline_says_the_model_keeps_min() -> None:
    m = model("m", gpu_profile(gpus=4), min=1, max=2)
    state = make_plan(replace(inputs([model("m", gpu_profile(gpus=4), min=2)], [host("a"), host("b")], FACTS))
                      ).applied(State(lineage="test"))
    a = replace(host("a", "draining"), drain_deadline=DEADLINE)
    plan = make_plan(replace(inputs([m], [a, host("b")], FACTS, state=state), now=DEADLINE))
    assert [(r, c) for r, c, _ in _destroys(plan)] == [("m-1", "drain_deadline")]
    assert _destroys(plan)[0][2].endswith("no node can take a replacement: m keeps 1 replica, scaling.min 1")


def test_a_replacement_that_fits_moves_whatever_the_deadline() -> None:
    a = replace(host("a", "draining"), drain_deadline=DEADLINE)
    plan = make_plan(replace(inputs([M], [a, host("b"), host("c")], [*FACTS, facts("c", 4)], state=_state()),
                             now=DEADLINE + timedelta(days=1)))
    assert [(x.action, x.replica, x.replaces, x.code) for x in plan.actions] == [
        ("replace", "m-3", "m-1", "node_draining")]


def test_without_a_clock_no_deadline_has_passed() -> None:
    plan = make_plan(_at(None))
    assert not plan.has_changes
    assert "at most until the drain deadline 2025-01-01T01:00:00Z" in plan.unplaced[0].not_moved[0].reason


def test_a_drain_without_deadline_says_how_to_set_one() -> None:
    plan = make_plan(_at(timedelta(days=365), deadline=False))
    assert not plan.has_changes
    assert plan.unplaced[0].not_moved[0].reason == (
        "node a is draining; it stays until a replacement fits; the drain has no deadline (`llmgw drain a "
        "--deadline 1h` sets one; the first plan after it destroys the replica)")


def test_explain_says_what_the_drain_waits_for_and_until_when() -> None:
    text = render_explanation(explain(_at(-timedelta(minutes=5)), "m"))
    assert ("  m-1: node a is draining; it stays until a replacement fits, at most until the drain deadline "
            "2025-01-01T01:00:00Z; the first plan after it destroys the replica") in text
    assert "    a: draining" in text
    after = render_explanation(explain(_at(timedelta(minutes=5)), "m"))
    assert "  m-1: node a is draining; destroyed: its drain deadline 2025-01-01T01:00:00Z has passed" in after


def test_the_plan_is_the_same_bytes_at_two_times_before_the_deadline() -> None:
    # What apply checks (check_replanned): the plan must not change with the clock alone.
    assert make_plan(_at(-timedelta(minutes=59))).to_json() == make_plan(_at(-timedelta(seconds=1))).to_json()


def test_next_change_is_the_deadline_then_nothing() -> None:
    assert _at(-timedelta(minutes=5)).next_change() == DEADLINE
    assert _at(timedelta(0)).next_change() is None  # passed: nothing more is due
    assert _at(None).next_change() is None  # no clock
    stale = facts("b", 4).model_copy(update={"stale_since": DEADLINE})
    later = replace(_at(-timedelta(minutes=5)), facts={"a": FACTS[0], "b": stale})
    assert later.next_change() == DEADLINE  # the deadline comes before b's unreachable_after
    assert replace(later, now=DEADLINE).next_change() == DEADLINE + timedelta(seconds=later.unreachable_after)
