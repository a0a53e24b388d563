"""What `status`, `models` and `models MODEL` say on the example site after a good apply, through
the real CLI: each answer pinned where an older one misled (#35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw.inventory import load_inventory
from llmgw.nodetime import format_time
from llmgw.planner import Plan
from llmgw.site import Site
from llmgw.state import read_state, write_state
from llmgw.views.planned import load_site_data, view_plan
from tests.support.cli import run_cli
from tests.support.example_site import example_site, ready_example_site

CODER_ONLY_ON_CODING_HOSTS = "      - name: cpu\n        engine: llamacpp\n        gpus: 0\n        min_memory_gb: 24\n"


@pytest.fixture
def draining(tmp_path: Path) -> Path:
    """The coder's only coding host (l40s-01) draining, and no CPU profile to fall back to:
    its replica stays, since no node takes a replacement."""
    root = ready_example_site(tmp_path)
    coding = root / "catalog" / "coding.yaml"
    text = coding.read_text()
    assert CODER_ONLY_ON_CODING_HOSTS in text
    coding.write_text(text.replace(CODER_ONLY_ON_CODING_HOSTS, ""))
    assert run_cli("-C", str(root), "drain", "l40s-01").exit_code == 0
    return root


def stays(root: Path) -> str:
    """Why the replica stays: until a replacement fits, at most until the drain's deadline (an
    hour after the fixture ran `llmgw drain`)."""
    deadline = load_inventory(root / "inventory").hosts["l40s-01"].drain_deadline
    assert deadline is not None
    return (f"node l40s-01 is draining; it stays until a replacement fits, at most until the drain deadline "
            f"{format_time(deadline)}; the first plan after it destroys the replica; no node takes a replacement: "
            "does not match node_selector role=coding (has role=general) (17 of 20 nodes)")


def test_status_says_the_drain_keeps_the_replica_not_that_the_model_cannot_be_placed(
        draining: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the reason, with the drain's deadline, on one line
    r = run_cli("-C", str(draining), "status", "--no-router")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "Models    7: 2 ready, 0 starting, 3 not placed, 1 not moved, 0 stopped, 1 on demand" in lines
    # The old text: "qwen2.5-coder-14b  1/1  does not match node_selector role=coding ..." under
    # "Cannot be placed", as if the selector kept the model out.
    assert not [ln for ln in lines if ln.startswith("  qwen2.5-coder-14b ")]
    at = lines.index("Not moved (1; `llmgw explain MODEL` says why):")
    assert lines[at + 1] == f"  qwen2.5-coder-14b-1  {stays(draining)}"
    data = json.loads(run_cli("-C", str(draining), "status", "--json", "--no-router").stdout)
    assert [u["model"] for u in data["unplaceable"]] == ["grok-1", "llama-3.1-405b", "llama-4-maverick"]
    assert data["not_moved"] == [{"model": "qwen2.5-coder-14b", "replica": "qwen2.5-coder-14b-1",
                                  "code": "node_draining", "reason": stays(draining)}]


def test_models_says_not_moved_where_every_replica_is_placed(draining: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    r = run_cli("-C", str(draining), "models", "--no-router")
    assert any(ln.startswith("qwen2.5-coder-14b  coder            yes                1/1       not moved  ")
               for ln in r.stdout.splitlines())
    assert ("not moved: a replica stays where the plan would move it from; `llmgw explain MODEL` says why"
            in r.stdout.splitlines())
    data = json.loads(run_cli("-C", str(draining), "models", "--json", "--no-router").stdout)
    coder = next(m for m in data["models"] if m["name"] == "qwen2.5-coder-14b")
    assert (coder["status"], coder["replicas_text"], coder["hint"]) == (
        "not moved", "1/1", "llmgw explain qwen2.5-coder-14b")
    failure = next(f for f in data["failures"] if f["model"] == "qwen2.5-coder-14b")
    assert failure["summary"] == f"qwen2.5-coder-14b-1: {stays(draining)}"
    explained = run_cli("-C", str(draining), "explain", "coder").stdout.splitlines()
    assert explained[1] == "Placed: 1 of 1 replicas, but no node takes the replacement of qwen2.5-coder-14b-1:"


def test_the_views_plan_is_the_plan_llmgw_plan_makes(tmp_path: Path) -> None:
    # A state applied from `llmgw plan` (whole repositories pinned to their commits): the views'
    # plan used the catalog unpinned, and saw deepseek-v3 and llama-3.1-70b as changed definitions.
    root = example_site(tmp_path, state=False)
    plan = Plan.model_validate_json(run_cli("-C", str(root), "plan", "--json").stdout)
    site = Site.load(root)
    write_state(site.state_file, plan.applied(read_state(site.state_file)))
    assert run_cli("-C", str(root), "plan", "--detailed-exitcode").exit_code == 0
    assert view_plan(load_site_data(site))[0].actions == []


def test_models_model_is_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMGW_STORE", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    root = ready_example_site(tmp_path)
    store = root / "llmgw-store.sqlite"
    r = run_cli("-C", str(root), "models", "llama", "--no-router")
    assert r.exit_code == 0, r.stderr
    assert not store.exists()  # the old view made it
    assert r.stdout.splitlines()[-1] == f"No results stored: sqlite:///{store} does not exist yet"
    data = json.loads(run_cli("-C", str(root), "models", "llama", "--json", "--no-router").stdout)
    assert (data["bench"], data["checks"], data["store_exists"]) == ([], [], False)
    assert not store.exists()
