"""`llmgw plan` and `llmgw explain` on a recorded site, through the real CLI and inventory.

Golden files pin the human output (scripts read it); set LLMGW_UPDATE_GOLDEN=1 to rewrite
them after a deliberate change, and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmgw.planner import Plan
from llmgw.state import read_state, write_state
from tests.support.cli import run_cli
from tests.support.plan_site import write_site

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("LLMGW_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}; LLMGW_UPDATE_GOLDEN=1 rewrites it"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_site(tmp_path_factory.mktemp("planner") / "site")


def test_plan_text_json_and_exit_codes(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    text = run_cli("-C", str(site), "plan", "--out", str(out), "--detailed-exitcode")
    assert text.exit_code == 2, text.stderr
    assert text.stdout.endswith(f"\nSaved the plan to {out}; `llmgw apply {out}` applies exactly this plan.\n")
    golden("site-plan.txt", text.stdout.split("\nSaved the plan")[0])
    as_json = run_cli("-C", str(site), "plan", "--json")
    assert as_json.exit_code == 0
    assert as_json.stdout == out.read_text(), "--json and --out write the same bytes, run after run"
    plan = Plan.model_validate_json(out.read_text())
    assert plan.summary.model_dump() == {"add": 4, "change": 2, "destroy": 0}
    assert {u.model for u in plan.unplaced} == {"giant", "llama-70b"}
    for u in plan.unplaced:
        for r in u.rejections:  # every reason names its node (or fabric) and the shortfall
            assert r.reason.startswith(f"{r.node}: " if r.node else f"fabric {r.fabric}: ")
    doc = json.loads(out.read_text())
    assert set(doc) >= {"state_serial", "state_lineage", "summary", "actions", "desired", "unplaced", "on_demand"}
    assert set(doc["desired"]["replicas"][0]["shards"][0]) >= {"node", "rank", "gpus", "port", "unit"}


def test_after_apply_there_are_no_changes(site: Path, tmp_path: Path) -> None:
    result = run_cli("-C", str(site), "plan", "--json")
    plan = Plan.model_validate_json(result.stdout)
    state_file = site / "state.json"
    write_state(state_file, plan.applied(read_state(state_file)))
    try:
        again = run_cli("-C", str(site), "plan", "--detailed-exitcode")
        assert again.exit_code == 0, again.stdout + again.stderr
        golden("site-plan-applied.txt", again.stdout)
        assert "No changes. The fleet matches the catalog." in again.stdout
    finally:
        state_file.unlink()


def test_explain_placed_model_by_alias(site: Path) -> None:
    result = run_cli("-C", str(site), "explain", "coder")
    assert result.exit_code == 0, result.stderr
    golden("explain-coder.txt", result.stdout)


def test_explain_unplaced_and_on_demand(site: Path) -> None:
    giant = run_cli("-C", str(site), "explain", "giant")
    assert giant.exit_code == 0
    assert "Not placed: 0 of 1 replicas placed." in giant.stdout
    assert "    gpu-node-01: has no H200-141GB GPUs (has 8 H100-80GB), needs 8" in giant.stdout
    od = run_cli("-C", str(site), "explain", "qwen-7b", "--json")
    doc = json.loads(od.stdout)
    assert doc["status"] == "on demand" and doc["attempts"] == []
    assert {v["node"] for v in doc["now"]["cpu"] if v["fits"]} >= {"cpu-01", "gpu-node-01"}


def test_explain_a_model_not_in_the_catalog(site: Path) -> None:
    result = run_cli("-C", str(site), "explain", "nope")
    assert result.exit_code == 1
    assert "Error: nope is not in the catalog, so it is never placed" in result.stderr


def test_an_invalid_catalog_is_an_error_not_a_plan(tmp_path: Path) -> None:
    broken = write_site(tmp_path / "site", catalog="models:\n  - name: x\n    source: hf://a/b/c\n")
    result = run_cli("-C", str(broken), "plan", "--detailed-exitcode")
    assert result.exit_code == 1
    assert "'profiles' is required" in result.stderr
