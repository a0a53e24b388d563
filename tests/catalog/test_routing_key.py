"""The catalog's `routing:` key: validated like every key, and carried by plan into the state's model records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from llmgw.planner import make_plan
from llmgw.state import ModelRecord, ScalingRecord, State
from tests.support.cli import run_cli
from tests.support.plan_inputs import cpu_profile, facts, host, inputs, model

MakeSite = Callable[..., Path]

BAD = """
models:
  - name: m
    source: hf://a/b/c.gguf
    routing: round-robin
    profiles: [{name: p, engine: llamacpp}]
"""


def test_a_bad_policy_is_an_error_at_its_line_with_the_allowed_values(site: MakeSite) -> None:
    r = run_cli("-C", str(site({"catalog/bad.yaml": BAD})), "catalog", "validate")
    out = r.stdout + r.stderr
    assert r.exit_code == 1, out
    assert "Error: the catalog has" in out
    assert "catalog/bad.yaml:4: models[0].routing: 'round-robin' is not allowed" in out
    assert "'least-load' or 'prefix-affinity'" in out
    assert "Traceback" not in out


def test_the_policy_reaches_the_plan_and_a_change_is_an_update() -> None:
    nodes = [host("n1")]
    host_facts = [facts("n1", n_gpus=0, mem_gb=64)]
    m = model("m", cpu_profile(), routing="prefix-affinity")
    assert model("plain", cpu_profile()).routing == "least-load"  # the default
    plan = make_plan(inputs([m], nodes, host_facts))
    assert [r.routing for r in plan.desired.models] == ["prefix-affinity"]
    # The state says least-load; the catalog now says prefix-affinity: the routers are told.
    before = State(lineage="test", models=[ModelRecord(name="m", scaling=ScalingRecord(min=1, max=1,
                                                                                        idle_timeout=1800))])
    # (min 0: no replica to create, so the model record change is the only action)
    plan = make_plan(inputs([model("m", cpu_profile(), routing="prefix-affinity", min=0)], nodes, host_facts,
                            state=before))
    updates = [a for a in plan.actions if a.action == "update"]
    assert len(updates) == 1 and "routing least-load -> prefix-affinity" in updates[0].reason
