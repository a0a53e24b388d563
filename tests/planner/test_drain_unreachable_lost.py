"""A node that stops answering: its facts stale for unreachable_after make it unreachable (no new
replica goes there, its replicas stay), for lost_after lost (its replicas are replaced elsewhere,
keeping min, and removed from the state without contacting it). Times are pinned."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from llmgw.planner import PlanInputs, make_plan
from llmgw.planner.explain import explain, render_explanation
from llmgw.planner.render import render_plan
from llmgw.state import State
from tests.support.plan_inputs import T0, facts, gpu_profile, host, inputs, model

M = model("m", gpu_profile(gpus=4), min=1)
HOSTS = [host("a"), host("b"), host("c")]
UNREACHABLE, LOST = 300, 1800
STALE = T0 + timedelta(hours=1)  # the first gathering that missed b


def _state() -> State:
    # m-1 on a (first by name); b and c free
    return make_plan(inputs([M], HOSTS[:1], [facts("a", 4)])).applied(State(lineage="test"))


def _at(after_stale: timedelta, *, others: bool = True) -> PlanInputs:
    dead = facts("a", 4, gathered_at=T0).model_copy(update={"stale_since": STALE,
                                                           "stale_reason": "unreachable: ssh timed out"})
    fs = [dead, facts("b", 4), facts("c", 4)] if others else [dead]
    base = inputs([M], HOSTS if others else HOSTS[:1], fs, state=_state())
    return replace(base, now=STALE + after_stale, unreachable_after=UNREACHABLE, lost_after=LOST)


def test_stale_but_not_yet_unreachable_changes_nothing() -> None:
    plan = make_plan(_at(timedelta(seconds=UNREACHABLE - 1)))
    assert not plan.has_changes
    assert "a: facts are stale since 2025-01-01T01:00:00+00:00 (unreachable: ssh timed out); planned with its " \
           "last good facts" in plan.notes


def test_unreachable_keeps_its_replicas_and_takes_nothing_new() -> None:
    inp = _at(timedelta(seconds=UNREACHABLE))
    plan = make_plan(inp)
    assert not plan.has_changes
    assert ("a is unreachable: no gathering has reached it since 2025-01-01T01:00:00Z (unreachable: ssh timed "
            "out); it counts as lost at 2025-01-01T01:30:00Z: nothing new goes there; its replicas stay until "
            "then, when plans replace them elsewhere") in plan.notes
    # a second model's replica goes anywhere but a
    two = make_plan(replace(inp, catalog=inputs([M, model("n", gpu_profile(gpus=4))], HOSTS).catalog))
    [create] = [x for x in two.actions if x.action == "create"]
    assert [r.shards[0].node for r in two.desired.replicas if r.id == create.replica] == ["b"]
    text = render_explanation(explain(replace(inp, catalog=inputs([M, model("n", gpu_profile(gpus=4))],
                                                                  HOSTS).catalog), "n"))
    assert ("    a is unreachable: no gathering has reached it since 2025-01-01T01:00:00Z (unreachable: ssh timed "
            "out); it counts as lost at 2025-01-01T01:30:00Z") in text


def test_lost_replaces_its_replicas_elsewhere_and_drops_them_unreached() -> None:
    plan = make_plan(_at(timedelta(seconds=LOST)))
    [a] = plan.actions
    assert (a.action, a.replica, a.replaces, a.code, a.unreached) == ("replace", "m-2", "m-1", "node_lost", ["a"])
    assert a.reason == ("node a is lost: no gathering has reached it since 2025-01-01T01:00:00Z (unreachable: ssh "
                        "timed out), lost since 2025-01-01T01:30:00Z")
    assert [r.shards[0].node for r in plan.desired.replicas] == ["b"]
    assert ("a is lost: no gathering has reached it since 2025-01-01T01:00:00Z (unreachable: ssh timed out), lost "
            "since 2025-01-01T01:30:00Z: its replicas are replaced elsewhere and dropped from the state without "
            "contacting it; nothing new goes there") in plan.notes


def test_lost_with_nowhere_to_go_is_destroyed_from_the_state_alone() -> None:
    plan = make_plan(_at(timedelta(seconds=LOST), others=False))
    [a] = plan.actions
    assert (a.action, a.replica, a.code, a.unreached) == ("destroy", "m-1", "no_replacement", ["a"])
    assert a.reason.endswith("lost since 2025-01-01T01:30:00Z; no node can take a replacement")
    text = render_plan(plan, _state())
    assert ("  # m-1 will be destroyed: node a is lost: no gathering has reached it since 2025-01-01T01:00:00Z "
            "(unreachable: ssh timed out), lost since 2025-01-01T01:30:00Z; no node can take a replacement\n"
            "  # on a (lost): removed from the state only; the host is not contacted\n") in text


def test_a_node_never_gathered_is_not_lost() -> None:
    inp = replace(inputs([M], HOSTS[:1], [], state=_state()), now=T0 + timedelta(days=30))
    assert not make_plan(inp).has_changes
