"""The example pipelines (examples/gitops/): their steps, run in the order the workflows list
them, against a site: validate -> plan (saved, and rendered as Markdown) -> apply the saved
plan -> the same plan again, refused as stale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.yamlio import load_yaml

REPO = Path(__file__).resolve().parents[2]
GITOPS = REPO / "examples" / "gitops"
SCRIPT = GITOPS / "pipeline.sh"
STEP = re.compile(r"ci/llmgw-pipeline\.sh (\w+)")

CATALOG = """\
models:
  - name: tiny
    source: hf://org/tiny/tiny.gguf
    scaling: {min: 0, max: 1}
    profiles:
      - name: cpu
        engine: llamacpp
"""


def steps_of(commands: list[str]) -> list[str]:
    return [m.group(1) for c in commands for m in STEP.finditer(c)]


def github_steps(job: str) -> list[str]:
    workflow = load_yaml(GITOPS / "github-actions.yml")
    return steps_of([str(s.get("run", "")) for s in workflow["jobs"][job]["steps"]])


def gitlab_steps(job: str) -> list[str]:
    return steps_of([str(line) for line in load_yaml(GITOPS / "gitlab-ci.yml")[job]["script"]])


def test_both_ci_systems_run_the_same_steps_in_order() -> None:
    assert github_steps("plan") == ["validate", "plan"]
    assert github_steps("apply") == ["validate", "plan", "apply"] == gitlab_steps("apply")
    assert gitlab_steps("validate") + gitlab_steps("plan") == ["validate", "plan"]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    (root / "catalog").mkdir(parents=True)
    (root / "llmgw.yaml").write_text("inventory: hosts.yml\n")
    (root / "hosts.yml").write_text("all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n")
    (root / "catalog" / "tiny.yaml").write_text(CATALOG)
    return root


def run_step(site: Path, step: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMGW": str(Path(sys.executable).parent / "llmgw"), "LLMGW_AUTHOR": "ci run 7"}
    env.pop("GITHUB_OUTPUT", None)
    return subprocess.run([str(SCRIPT), step], cwd=site, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_the_apply_job_runs_its_steps_and_a_stale_plan_is_refused(site: Path) -> None:
    for step in github_steps("apply"):
        done = run_step(site, step)
        assert done.returncode == 0, f"{step}: {done.stdout}\n{done.stderr}"
        if step == "plan":
            md = (site / "plan.md").read_text()
            assert md.startswith("### llmgw: Plan: 0 to add, 1 to change, 0 to destroy")
            assert "| `~` update | tiny | tiny |" in md
        if step == "apply":
            assert "Apply complete!" in done.stdout
    # The pipeline re-run with the plan saved before that apply: refused, saying to re-plan.
    again = run_step(site, "apply")
    assert again.returncode == 1
    assert "stale" in again.stderr and "llmgw plan --out" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr


def test_markdown_escapes_what_a_pull_request_controls() -> None:
    from llmgw.planner.markdown import md

    hostile = "m|x <img src=x onerror=alert(1)> [link](http://evil) `code` **bold**\nsecond line"
    out = md(hostile)
    assert "<img" not in out and "&lt;img" in out
    assert "\\|" in out and "\\[link\\]" in out and "\\`code\\`" in out and "\\*\\*bold" in out
    assert "\n" not in out
