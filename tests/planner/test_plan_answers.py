"""What `plan` and `explain` say on the example site after a good apply, through the real CLI (#35)."""

from __future__ import annotations

import json
from pathlib import Path

from llmgw.planner import Plan
from llmgw.state import read_state, write_state
from tests.support.cli import run_cli
from tests.support.example_site import ready_example_site


def test_a_plan_keeping_replicas_above_a_lowered_min_says_why(tmp_path: Path) -> None:
    root = ready_example_site(tmp_path)
    assert run_cli("-C", str(root), "scale", "llama", "--min", "1").exit_code == 0
    plan = json.loads(run_cli("-C", str(root), "plan", "--json").stdout)
    assert not [a for a in plan["actions"] if a["model"] == "llama-3.1-70b" and a["action"] == "destroy"]
    why = ("the plan stops replicas only above max (4); nothing else stops them (no target_in_flight); `llmgw scale "
           "llama-3.1-70b --min 1 --max 1` makes the next plan destroy those above 1")
    assert f"llama-3.1-70b: 2 replicas stay, above scaling.min 1 (lowered from 2): {why}" in plan["notes"]
    # Once applied, the state records min 1: the next plan still says why the two stay.
    state_file = root / "state.json"
    write_state(state_file, Plan.model_validate(plan).applied(read_state(state_file)))
    plan = json.loads(run_cli("-C", str(root), "plan", "--json").stdout)
    assert plan["actions"] == []
    assert f"llama-3.1-70b: 2 replicas stay, above scaling.min 1: {why}" in plan["notes"]
    # The way out the note names does what it says.
    assert run_cli("-C", str(root), "scale", "llama", "--min", "1", "--max", "1").exit_code == 0
    plan = json.loads(run_cli("-C", str(root), "plan", "--json").stdout)
    assert [(a["action"], a["replica"], a["code"]) for a in plan["actions"] if a["model"] == "llama-3.1-70b"] == [
        ("destroy", "llama-3.1-70b-2", "scaling_max")]
    assert not [n for n in plan["notes"] if n.startswith("llama-3.1-70b:")]


def test_explain_names_the_disk_once_with_units(tmp_path: Path) -> None:
    # gpu-node-04's cache dir is a mount of its own: the old text named it twice and gave no unit
    # ("10 GB free on /var/cache/llmgw for /var/cache/llmgw, weights need 131.4").
    root = ready_example_site(tmp_path)
    path = root / "facts" / "gpu-node-04.json"
    facts = json.loads(path.read_text())
    assert facts["filesystems"][0]["mount"] == "/var/cache/llmgw"
    facts["filesystems"][0]["free_bytes"] = 10 * 1024**3
    # Without its operator's copy of the repository (served in place, it needs no disk: #35).
    facts["weights"] = [w for w in facts["weights"] if not w["path"].endswith("/Llama-3.1-70B-Instruct")]
    path.write_text(json.dumps(facts))
    result = run_cli("-C", str(root), "explain", "llama")
    assert result.exit_code == 0, result.stderr
    assert "    gpu-node-04: 10 GB free on /var/cache/llmgw, weights need 131.4 GB\n" in result.stdout
