"""What an operator was promised (#35), on lab hosts with the real llama-server: a drain that
reaches its deadline ends, even when no other node can take the replica (on the session's
shared lab); a killed host becomes lost and its replica is replaced (on a lab of its own: a
dead host would break the shared one for the areas after it).

The tiny replica runs on one host; the other two are cordoned, so nothing can take it. The
host is drained with a two-second deadline; once the clock has passed it, `plan` destroys the
replica (reason drain_deadline, saying how far below min tiny falls), apply stops its unit,
and `status` says the drain is over and why tiny is not placed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from llmgw.apply import hosts_for
from llmgw.facts.cache import read_facts
from llmgw.inventory import load_inventory
from llmgw.nodetime import format_time
from llmgw.site import Site
from tests.support.lab import Lab, lab, shape, turn
from tests.support.traffic import Streams
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


TWO_MODELS = """\
models:
  - name: tiny
    source: file:///srv/models/tiny.gguf
    scaling: {min: 1, max: 1}
    profiles:
      - {name: cpu, engine: llamacpp, gpus: 0, min_memory_gb: 1, args: ["--ctx-size", "2048"],
         node_selector: {pool: work}}
  - name: other
    source: file:///srv/models/tiny.gguf
    scaling: {min: 1, max: 1}
    profiles:
      - {name: cpu, engine: llamacpp, gpus: 0, min_memory_gb: 1, args: ["--ctx-size", "2048"],
         node_selector: {pool: front}}
"""
CLIENTS = 4


def test_a_killed_host_becomes_lost_and_its_replica_is_replaced(tmp_path: Path) -> None:
    """node1 (the router) serves `other`; node2 and node3 may serve `tiny`. The host of tiny is
    killed: the next `facts` marks it stale, and once lost_after (2 s) has passed since, plan
    replaces tiny on the other work node and apply drops the old replica from the state without
    contacting the dead host, while clients of `other` see no failed request."""
    with lab(tmp_path, nodes=3, prefix="llmgw-lost") as it:
        shape(it, catalog={"models.yaml": TWO_MODELS}, config="unreachable_after: 1s\nlost_after: 2s\n",
              host_vars={"node1": {"llmgw_labels": {"pool": "front"}}, "node2": {"llmgw_labels": {"pool": "work"}},
                         "node3": {"llmgw_labels": {"pool": "work"}}})
        it.ok("apply", "--auto-approve")
        [old] = [r for r in it.state.replicas if r.model == "tiny"]
        dead = old.shards[0].node
        assert dead in ("node2", "node3")
        survivor = "node3" if dead == "node2" else "node2"
        container = load_inventory(it.site / "hosts.yml").nodes[dead].vars["llmgw_lab_container"]
        key = hosts_for(Site.load(it.site)).create_key("lost")["key"]
        with Streams(it.router_url + "/v1", key, CLIENTS, model="other") as streams:
            streams.wait_for(CLIENTS)
            killed = subprocess.run(["podman", "kill", container], capture_output=True, text=True, check=False,
                                    timeout=120)
            assert killed.returncode == 0, killed.stderr
            report = json.loads(it.ok("facts", "--json").stdout)
            assert [s["host"] for s in report["stale"]] == [dead]
            stale_since = read_facts(it.site / "facts")[dead].stale_since
            assert stale_since is not None
            lost_at = stale_since + timedelta(seconds=2)
            wait_until(lambda: datetime.now(UTC) >= lost_at, timeout=30, what=f"the clock to pass {lost_at}")
            nodes = {n["node"]: n for n in json.loads(it.ok("nodes", "--json").stdout)["nodes"]}
            assert nodes[dead]["condition"] == "lost", nodes[dead]
            plan = json.loads(it.ok("plan", "--json").stdout)
            [move] = plan["actions"]
            assert (move["action"], move["replaces"], move["code"], move["unreached"]) == (
                "replace", old.id, "node_lost", [dead])
            applied = it.ok("apply", "--auto-approve")
            assert f"  # on {dead} (lost): removed from the state only; the host is not contacted" in applied.stdout
            assert f"{dead} is lost: {old.shards[0].unit} is removed from the state only" in applied.stderr  # say
            [new] = [r for r in it.state.replicas if r.model == "tiny"]
            assert new.shards[0].node == survivor and new.state == "ready"
            active = it.ansible(survivor, "-m", "ansible.builtin.command", "-a",
                                f"systemctl is-active {new.shards[0].unit}")  # the dead host is not asked
            assert active.returncode == 0, active.stdout + active.stderr
            streams.wait_for(CLIENTS)
        assert streams.failures == [], (len(streams.failures), streams.failures[:5])
        print("lost node lab:", {"dead": dead, "replacement": new.id, "on": survivor, "streams": streams.ok})
