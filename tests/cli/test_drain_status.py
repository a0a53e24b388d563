"""What `status`, `nodes` and `plan` say of a drain with a deadline and of a node that stopped
answering, through the real CLI on a small live site. Times are far from the test's clock
(2000, 2999; intervals of a second or a century) so every answer is exact."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from llmgw.facts.cache import write_facts
from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import State, write_state
from tests.support.cli import run_cli
from tests.support.plan_inputs import facts

CATALOG = """\
models:
  - name: m
    source: hf://org/m/m.gguf
    scaling: {min: 2}
    profiles: [{name: gpu, engine: vllm, gpus: 4}]
"""
INVENTORY = """\
all:
  children:
    llmgw_nodes:
      hosts:
        a: {ansible_host: 10.0.0.1}
        b: {ansible_host: 10.0.0.2}
        c:
          ansible_host: 10.0.0.3
"""
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def _site(tmp: Path, config: str) -> Path:
    """a and b run m's two replicas (a node each); c is free, its facts stale since 2020."""
    root = tmp / "site"
    for sub in ("catalog", "inventory", "facts"):
        (root / sub).mkdir(parents=True)
    (root / "llmgw.yaml").write_text(config)
    (root / "catalog" / "m.yaml").write_text(CATALOG)
    (root / "inventory" / "hosts.yml").write_text(INVENTORY)
    for f in (facts("a", 4, gathered_at=LONG_AGO), facts("b", 4, gathered_at=LONG_AGO)):
        write_facts(root / "facts", f)
    write_facts(root / "facts", facts("c", 4, gathered_at=LONG_AGO).model_copy(
        update={"stale_since": LONG_AGO, "stale_reason": "unreachable: ssh: No route to host"}))
    site = Site.load(root)
    # the state a full apply leaves, made while c still answered
    fresh = load_inputs(site)
    healthy = {**fresh.facts, "c": facts("c", 4, gathered_at=LONG_AGO)}
    plan = make_plan(replace(fresh, facts=healthy, nodes={n: h for n, h in fresh.nodes.items() if n != "c"}))
    write_state(site.state_file, plan.applied(State(lineage="test")))
    return root


def _drain_a(root: Path, deadline: str) -> None:
    hosts = root / "inventory" / "hosts.yml"
    hosts.write_text(hosts.read_text().replace(
        "        a: {ansible_host: 10.0.0.1}\n",
        f'        a: {{ansible_host: 10.0.0.1, llmgw_node_state: draining, llmgw_drain_deadline: "{deadline}"}}\n'))


def test_status_says_what_a_drain_waits_for_and_that_c_is_unreachable(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    root = _site(tmp_path, "unreachable_after: 1s\nlost_after: 999999h\n")  # c: unreachable, not lost
    _drain_a(root, "2999-01-01T00:00:00Z")
    view = json.loads(run_cli("-C", str(root), "status", "--no-router", "--json").stdout)
    assert view["drains"] == [{"node": "a", "deadline": "2999-01-01T00:00:00Z", "deadline_passed": False,
                               "replicas": ["m-1"], "moving": [], "waiting": ["m-1"], "destroyed_at_deadline": []}]
    assert (view["nodes"]["unreachable"], view["nodes"]["lost"]) == (["c"], [])
    text = run_cli("-C", str(root), "status", "--no-router").stdout
    assert "\n  a drains until 2999-01-01T00:00:00Z: m-1 waits for a node to take a replacement, at most until " \
           "2999-01-01T00:00:00Z\n" in text
    assert "; unreachable (nothing new goes there): c\n" in text
    [nm] = view["not_moved"]
    assert nm["reason"].startswith("node a is draining; it stays until a replacement fits, at most until the drain "
                                   "deadline 2999-01-01T00:00:00Z; the first plan after it destroys the replica")
    # c would fit m-1's replacement but is unreachable: explain names it
    explained = run_cli("-C", str(root), "explain", "m").stdout
    assert ("    c is unreachable: no gathering has reached it since 2020-01-01T00:00:00Z (unreachable: ssh: No route "
            "to host); it counts as lost at 2134-01-29T15:00:00Z\n") in explained
    nodes = {n["node"]: n for n in json.loads(run_cli("-C", str(root), "nodes", "--json").stdout)["nodes"]}
    assert (nodes["c"]["condition"], nodes["c"]["lost_at"]) == ("unreachable", "2134-01-29T15:00:00Z")
    assert nodes["a"]["drain_deadline"] == "2999-01-01T00:00:00Z" and nodes["b"]["condition"] is None


def test_after_the_deadline_plan_destroys_and_status_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    root = _site(tmp_path, "unreachable_after: 1s\nlost_after: 999999h\n")
    _drain_a(root, "2000-01-01T00:00:00Z")
    plan = json.loads(run_cli("-C", str(root), "plan", "--json").stdout)
    [a] = plan["actions"]
    assert (a["action"], a["replica"], a["code"]) == ("destroy", "m-1", "drain_deadline")
    assert a["reason"] == ("node a is draining and its drain deadline 2000-01-01T00:00:00Z has passed; no node can "
                           "take a replacement: m falls to 1 of scaling.min 2 replicas, 1 below min")
    text = run_cli("-C", str(root), "status", "--no-router").stdout
    assert "\n  a drains; its deadline 2000-01-01T00:00:00Z has passed: the next apply destroys m-1: no node can " \
           "take it\n" in text


def test_a_lost_node_is_shown_and_its_replica_replaced(tmp_path: Path) -> None:
    root = _site(tmp_path, "unreachable_after: 1s\nlost_after: 2s\n")
    # b's facts stop too: b is lost, c as well; only a answers, and a is full: m-2 is destroyed
    write_facts(root / "facts", facts("b", 4, gathered_at=LONG_AGO).model_copy(
        update={"stale_since": LONG_AGO, "stale_reason": "unreachable: ssh timed out"}))
    plan = json.loads(run_cli("-C", str(root), "plan", "--json").stdout)
    [a] = plan["actions"]
    assert (a["action"], a["replica"], a["code"], a["unreached"]) == ("destroy", "m-2", "no_replacement", ["b"])
    view = json.loads(run_cli("-C", str(root), "status", "--no-router", "--json").stdout)
    assert (view["nodes"]["unreachable"], view["nodes"]["lost"]) == ([], ["b", "c"])
    nodes = run_cli("-C", str(root), "nodes")
    row = next(ln for ln in nodes.stdout.splitlines() if ln.startswith("b "))
    assert row.split()[1:3] == ["ready,", "lost"]
