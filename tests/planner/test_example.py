"""Golden plans on `inventories/example`, the recorded fleet anyone can plan against.

The site is copied first: recording a plan as applied writes its state file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from llmgw.planner import Plan
from llmgw.state import read_state, write_state
from tests.planner.test_cli import golden
from tests.support.cli import run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example"
# What a rejection may say: the node (or fabric) first, then a state, a label mismatch, or a
# shortfall with what is needed.
REASON = re.compile(
    r"^(?P<node>[\w.-]+): (cordoned|draining|does not match node_selector .+ \(has .+\)|.*needs .+|"
    r"every port in \d+-\d+ is taken)$")
FABRIC_REASON = re.compile(r"^fabric (?P<fabric>\S+): \d+ nodes? with \d+ GPUs? free, needs \d+$")


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("example") / "example"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("state.json*"))
    return dest


def test_plan_is_golden_and_byte_identical(example: Path) -> None:
    first = run_cli("-C", str(example), "plan", "--detailed-exitcode")
    assert first.exit_code == 2, first.stderr
    golden("example-plan.txt", first.stdout)
    one = run_cli("-C", str(example), "plan", "--json")
    two = run_cli("-C", str(example), "plan", "--json")
    assert one.stdout == two.stdout
    plan = Plan.model_validate_json(one.stdout)
    assert plan.desired.replicas, "the example places what fits"
    assert plan.unplaced, "and lists what does not"


def test_every_rejection_names_the_node_and_the_shortfall(example: Path) -> None:
    plan = Plan.model_validate_json(run_cli("-C", str(example), "plan", "--json").stdout)
    for u in plan.unplaced:
        for r in u.rejections:
            if r.node is not None:
                m = REASON.match(r.reason)
                assert m and m.group("node") == r.node, r.reason
            else:
                m = FABRIC_REASON.match(r.reason)
                assert m and m.group("fabric") == r.fabric, r.reason


def test_recorded_as_applied_there_are_no_changes(example: Path) -> None:
    plan = Plan.model_validate_json(run_cli("-C", str(example), "plan", "--json").stdout)
    state_file = example / "state.json"
    write_state(state_file, plan.applied(read_state(state_file)))
    try:
        again = run_cli("-C", str(example), "plan", "--detailed-exitcode")
        assert again.exit_code == 0, again.stdout
        assert "\nNo changes. The fleet matches the catalog.\n" in again.stdout
    finally:
        state_file.unlink()


@pytest.mark.parametrize("model", ["coder", "llama-3.1-405b", "qwen2.5-7b"])
def test_explain_is_golden(example: Path, model: str) -> None:
    result = run_cli("-C", str(example), "explain", model)
    assert result.exit_code == 0, result.stderr
    golden(f"example-explain-{model}.txt", result.stdout)
