"""Apply of a plan that replaces a lost node's replica: the new one starts, the old one is
removed from the state without any Ansible run against the lost host, and apply says so."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import read_state
from tests.apply.test_executor import Recorder, applier, site  # noqa: F401  (site: the fixture)


def test_a_lost_nodes_replica_is_replaced_and_dropped_without_contacting_it(site: Site) -> None:  # noqa: F811
    applier(site, Recorder(site)).run()
    state = read_state(site.state_file)
    victim = next(r for r in state.replicas if len(r.shards) == 1)
    node = victim.shards[0].node
    path = site.facts_dir / f"{node}.json"
    facts = json.loads(path.read_text())
    facts.update(stale_since=facts["gathered_at"], stale_reason="unreachable: ssh: No route to host")
    path.write_text(json.dumps(facts))
    inputs = load_inputs(Site.load(site.root))
    assert inputs.now is None  # a recorded site has no clock: the test gives it one
    lost_at = inputs.facts[node].gathered_at + timedelta(seconds=inputs.lost_after)
    plan = make_plan(replace(inputs, now=lost_at))
    [move] = [a for a in plan.actions if a.replaces == victim.id]
    assert (move.action, move.code, move.unreached) == ("replace", "node_lost", [node])
    said: list[str] = []
    hosts = Recorder(site)
    app = applier(site, hosts, plan)
    app.say = said.append
    app.run()
    touched = {h for what, detail, _ in hosts.calls if what in ("start", "stop") for h in detail}
    assert node not in touched
    assert read_state(site.state_file).replica(victim.id) is None
    assert read_state(site.state_file).replica(move.replica) is not None
    unit = victim.shards[0].unit
    assert (f"{node} is lost: {unit} is removed from the state only, without contacting the host; if it comes "
            "back, the next plan stops the unit there as a stray") in said
