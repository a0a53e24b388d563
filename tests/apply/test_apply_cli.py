"""`llmgw apply` refuses before touching any host: without approval off a terminal, and
with a plan made against another state than the one on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmgw.site import Site
from llmgw.state import State, read_state, write_state
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    shutil.copytree(REPO / "inventories" / "example", root, ignore=shutil.ignore_patterns("state.json*"))
    config = root / "llmgw.yaml"  # the example is recorded (apply refuses it): here a copy stands for a live site
    config.write_text(config.read_text().replace("recorded: true", "recorded: false"))
    return root


def test_apply_off_a_terminal_needs_auto_approve(site: Path) -> None:
    result = run_cli("-C", str(site), "apply")
    assert result.exit_code != 0
    assert "Plan:" in result.stdout  # the plan is shown first
    assert "--auto-approve" in result.stderr
    assert read_state(Site.load(site).state_file).serial == 0  # nothing was written


def test_a_saved_plan_against_an_older_state_is_refused(site: Path) -> None:
    saved = site / "plan.json"
    made = run_cli("-C", str(site), "plan", "--out", str(saved))
    assert made.exit_code == 0, made.stderr
    assert json.loads(saved.read_text())["state_serial"] == 0
    write_state(Site.load(site).state_file, State())  # someone applied meanwhile
    result = run_cli("-C", str(site), "apply", str(saved), "--auto-approve")
    assert result.exit_code == 1
    assert "stale" in result.stderr and "serial 0" in result.stderr and "llmgw plan --out" in result.stderr


def test_a_file_that_is_not_a_plan_is_refused(site: Path) -> None:
    bogus = site / "plan.json"
    bogus.write_text('{"hello": 1}')
    result = run_cli("-C", str(site), "apply", str(bogus), "--auto-approve")
    assert result.exit_code == 1 and "is not a llmgw plan" in result.stderr
