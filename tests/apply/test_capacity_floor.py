"""The capacity floor during rollouts: apply never takes a ready replica away without its
ready replacement when that would drop the model below `scaling.min`."""

from __future__ import annotations

import pytest

from llmgw.errors import PlanError
from llmgw.site import Site
from llmgw.state import read_state
from tests.apply.test_executor import Recorder, applier, plan_of, site  # noqa: F401 (site: a fixture)
from tests.support.cli import run_cli


def test_a_replace_without_its_replacement_is_refused_before_anything_stops(site: Site) -> None:  # noqa: F811
    applier(site, Recorder(site)).run()
    victim = read_state(site.state_file).replicas[0]
    assert run_cli("-C", str(site.root), "drain", victim.shards[0].node).exit_code == 0
    plan = plan_of(Site.load(site.root))
    replace = next(a for a in plan.actions if a.action == "replace" and a.replaces == victim.id)
    # A plan file with the replacement cut out (hand-edited, or truncated): nothing to bring up.
    cut = plan.model_copy(update={"desired": plan.desired.model_copy(update={
        "replicas": [r for r in plan.desired.replicas if r.id != replace.replica]})})
    hosts = Recorder(site)
    with pytest.raises(PlanError, match=f"replacing {victim.id} would leave .* below its scaling.min"):
        applier(site, hosts, cut).run()
    assert not any(c[0] == "stop" for c in hosts.calls)
    assert read_state(site.state_file).replica(victim.id).state == "ready"  # type: ignore[union-attr]
