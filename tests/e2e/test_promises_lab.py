"""What an operator was promised (#35), on the session's shared lab with the real llama-server:
a drain that reaches its deadline ends, even when no other node can take the replica.

The tiny replica runs on one host; the other two are cordoned, so nothing can take it. The
host is drained with a two-second deadline; once the clock has passed it, `plan` destroys the
replica (reason drain_deadline, saying how far below min tiny falls), apply stops its unit,
and `status` says the drain is over and why tiny is not placed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from llmgw.inventory import load_inventory
from llmgw.nodetime import format_time
from tests.support.lab import Lab, turn
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.engine]


@pytest.fixture(scope="module")
def the_lab(shared_lab: Lab) -> Iterator[Lab]:
    with turn(shared_lab) as it:  # the lab's own catalog: one tiny llama.cpp replica (min 1)
        yield it


def test_a_drain_that_reaches_its_deadline_stops_the_replica_and_status_says_why(
        the_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    the_lab.ok("apply", "--auto-approve")
    [replica] = the_lab.state.replicas
    node = replica.shards[0].node
    assert the_lab.active_units()[node] == {replica.shards[0].unit}
    others = sorted(set(load_inventory(the_lab.site / "hosts.yml").nodes) - {node})
    for other in others:
        the_lab.ok("cordon", other)
    the_lab.ok("drain", node, "--deadline", "2s")
    deadline = load_inventory(the_lab.site / "hosts.yml").hosts[node].drain_deadline
    assert deadline is not None
    wait_until(lambda: datetime.now(UTC) >= deadline, timeout=30, what=f"the clock to pass {deadline}")

    plan = json.loads(the_lab.ok("plan", "--json").stdout)
    [destroy] = plan["actions"]
    stamp = format_time(deadline)
    assert (destroy["action"], destroy["replica"], destroy["code"]) == ("destroy", replica.id, "drain_deadline")
    assert destroy["reason"] == (f"node {node} is draining and its drain deadline {stamp} has passed; no node can "
                                 "take a replacement: tiny falls to 0 of scaling.min 1 replica, 1 below min")
    before = the_lab.ok("status", "--no-router").stdout
    assert f"\n  {node} drains; its deadline {stamp} has passed: the next apply destroys {replica.id}: no node " \
           "can take it\n" in before

    applied = the_lab.ok("apply", "--auto-approve").stdout
    assert f"drain deadline {stamp} has passed" in applied
    assert the_lab.state.replicas == []
    assert all(not units for units in the_lab.active_units().values()), the_lab.active_units()

    view = json.loads(the_lab.ok("status", "--no-router", "--json").stdout)
    assert view["drains"] == [{"node": node, "deadline": stamp, "deadline_passed": True, "replicas": [],
                               "moving": [], "waiting": [], "destroyed_at_deadline": []}]
    [short] = view["unplaceable"]
    assert (short["model"], short["wanted"], short["placed"]) == ("tiny", 1, 0)
    after = the_lab.ok("status", "--no-router").stdout
    assert f"\n  {node} is drained: it runs no replica\n" in after
    print("drain deadline lab:", {"node": node, "deadline": stamp, "unplaceable": short["reason"]})
