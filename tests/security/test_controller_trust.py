"""Issue #32: the controller trusts only what it planned from commits it vetted.

A real controller follows a real git repository (tests/controller/support.py's site: model
`old` on n1, never contacted) with a local state, so its runs are a file; an attacker is a
committer to the followed branch, or someone who can write the runs store. Each attack must
leave the fleet as it was: the state's models, and what the controller says it did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmgw.controller import Controller
from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import State, WriteMeta
from tests.controller.support import NEW, clone, commit, git, site_repo


def start(work: Path, runtime: Path, policy: str) -> Controller:
    """The controller on the clone `work`, its first tick done on a state as if `old` were applied."""
    ctl = Controller(work, runtime=runtime, policy=policy, say=lambda _line: None)
    # The state as the first commit's plan leaves it, written where this controller keeps it.
    plan = make_plan(load_inputs(Site.load(work)))
    ctl.backend.write(plan.applied(State(lineage="")), expect_serial=0, meta=WriteMeta("seed"))
    ctl.tick()
    assert [r.status for r in ctl.runs.all()] == ["no-changes"], [(r.status, r.summary) for r in ctl.runs.all()]
    return ctl


def models(ctl: Controller) -> set[str]:
    return {m.name for m in ctl.backend.read().models}


def plan_beside(ctl: Controller, repo: Path, where: Path, files: dict[str, str]) -> str:
    """The JSON of a plan an attacker made for `files` on a clone, against the controller's own
    state (so nothing but the controller's checks stands in its way)."""
    scratch = clone(repo, where)
    for rel, text in files.items():
        (scratch / rel).write_text(text)
    shutil.copy(ctl.backend.path, scratch / "state.json")  # type: ignore[attr-defined]
    return make_plan(load_inputs(Site.load(scratch))).to_json()


def force_commit(repo: Path, files: dict[str, str], message: str) -> str:
    """A commit that adds files `.gitignore` ignores (`git add -f`), as an attacker would."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
        git(repo, "add", "-f", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    repo = site_repo(tmp_path, "state.json")
    return repo, clone(repo, tmp_path / "work")


def test_a_committed_runs_file_cannot_inject_an_approved_run(site: tuple[Path, Path], tmp_path: Path) -> None:
    repo, work = site
    ctl = start(work, tmp_path / "runtime", "approve")
    injected = plan_beside(ctl, repo, tmp_path / "attacker", {"catalog/new.yaml": NEW})
    commit(repo, {".gitignore": ".llmgw/\nfacts/\nstate.json\nstate.json.runs.json\n"}, "ignore the runs file")
    # Its commit is `HEAD` (the forged file cannot hold its own commit's hash): whatever is checked out.
    forged = [{"id": 99, "commit": "HEAD", "status": "approved", "summary": "Plan: 0 to add, 1 to change.",
               "destructive": False, "created_at": "2026-12-01T00:00:00+00:00",
               "updated_at": "2026-12-01T00:00:00+00:00", "plan": injected, "log": "",
               "approved_by": "alice@bastion", "controller": ctl.name}]
    force_commit(repo, {"catalog/new.yaml": NEW, "state.json.runs.json": json.dumps(forged)}, "add new")
    ctl.tick()
    ctl.tick()
    try:
        assert models(ctl) == {"old"}, "the injected plan was applied"
        runs = ctl.runs.all()
        assert not any(r.approved_by == "alice@bastion" for r in runs), [(r.id, r.status, r.log[-300:]) for r in runs]
        newest = ctl.runs.all()[0]
        assert newest.status == "failed" and "state.json.runs.json" in newest.summary, newest.summary
    finally:
        ctl.backend.close()


@pytest.mark.parametrize("path", ["state.json", "llmgw-engine-keys.secret", "llmgw-store.sqlite",
                                  ".llmgw/state.json", "catalog/state.json.runs.json"])
def test_a_commit_holding_a_runtime_path_is_refused(site: tuple[Path, Path], tmp_path: Path, path: str) -> None:
    repo, work = site
    ctl = start(work, tmp_path / "runtime", "auto")
    seeded = (ctl.backend.path).read_text()  # type: ignore[attr-defined]
    # A copy of the state (so an old controller would plan and apply on it), or a known secret.
    text = "ab" * 32 + "\n" if path.endswith(".secret") else seeded
    bad = force_commit(repo, {"catalog/new.yaml": NEW, path: text}, f"add new, and {path}")
    ctl.tick()
    try:
        newest = ctl.runs.all()[0]
        assert (newest.commit, newest.status) == (bad, "failed"), (newest.status, newest.summary, newest.log)
        assert path in newest.summary and "run time" in newest.summary, newest.summary
        assert models(ctl) == {"old"}
        assert git(work, "rev-parse", "HEAD") != bad  # never checked out
    finally:
        ctl.backend.close()


def test_demand_reads_the_applied_catalog_not_the_one_waiting(site: tuple[Path, Path], tmp_path: Path) -> None:
    repo, work = site
    ctl = start(work, tmp_path / "runtime", "approve")
    applied = git(work, "rev-parse", "HEAD")
    waiting_commit = commit(repo, {"catalog/new.yaml": NEW}, "add on-demand model new")
    ctl.tick()
    try:
        waiting = ctl.runs.all()[0]
        assert (waiting.commit, waiting.status) == (waiting_commit, "waiting"), waiting.summary
        assert ctl.scaler.ask("new", lambda _m: False).status == "pending"  # POST /api/v1/demand/activate
        ctl.demand_tick()
        # The applied catalog has no `new`: nothing of the waiting commit is acted on.
        activation = ctl.scaler.activation("new")
        assert activation is not None
        assert (activation.status, activation.reason) == ("failed", "new is not a model in the catalog")
        assert not any(r.summary.startswith("demand:") for r in ctl.runs.all())
        assert git(work, "rev-parse", "HEAD") == applied
        assert models(ctl) == {"old"}
    finally:
        ctl.backend.close()


def test_a_force_pushed_rewind_waits_for_approval(site: tuple[Path, Path], tmp_path: Path) -> None:
    repo, work = site
    ctl = start(work, tmp_path / "runtime", "auto")
    base = git(repo, "rev-parse", "HEAD")
    ahead = commit(repo, {"catalog/new.yaml": NEW}, "add new")
    ctl.tick()
    try:
        assert ctl.runs.all()[0].status == "applied" and git(work, "rev-parse", "HEAD") == ahead
        serial = ctl.backend.read().serial
        # A force-push: the branch now ends in a sibling of the commit applied, not a descendant.
        git(repo, "reset", "-q", "--hard", base)
        rewound = commit(repo, {"catalog/new.yaml": NEW.replace("max: 1", "max: 2")}, "new scales to 2")
        ctl.tick()
        ctl.tick()
        newest = ctl.runs.all()[0]
        assert (newest.commit, newest.status) == (rewound, "waiting"), (newest.status, newest.summary)
        assert newest.summary.startswith("rewind:") and ahead[:12] in newest.summary, newest.summary
        assert ctl.backend.read().serial == serial and git(work, "rev-parse", "HEAD") == ahead
        ctl.approve(newest.id, "operator")  # an operator who means the rewind
        ctl.tick()
        assert ctl.runs.get(newest.id).status == "applied", ctl.runs.get(newest.id).log
        assert git(work, "rev-parse", "HEAD") == rewound
    finally:
        ctl.backend.close()


def test_a_plan_changed_in_the_runs_store_is_refused_at_apply(site: tuple[Path, Path], tmp_path: Path) -> None:
    repo, work = site
    ctl = start(work, tmp_path / "runtime", "approve")
    commit(repo, {"catalog/new.yaml": NEW}, "add new")
    ctl.tick()
    try:
        waiting = ctl.runs.all()[0]
        assert waiting.status == "waiting", waiting.summary
        ctl.approve(waiting.id, "operator")
        # Someone who can write the runs store swaps the approved plan for one of their own.
        evil = plan_beside(ctl, repo, tmp_path / "attacker", {"catalog/new.yaml": NEW.replace("name: new",
                                                                                              "name: evil")})
        runs_file: Path = ctl.runs.path  # type: ignore[attr-defined]
        records = json.loads(runs_file.read_text())
        for r in records:
            if r["id"] == waiting.id:
                r["plan"] = evil
        runs_file.write_text(json.dumps(records))
        ctl.tick()
        done = ctl.runs.get(waiting.id)
        assert done.status == "failed" and "digest" in done.log, (done.status, done.log)
        assert models(ctl) == {"old"}
    finally:
        ctl.backend.close()


TRUSTING = """\
models:
  - name: trusty
    source: hf://org/trusty/trusty.gguf
    scaling: {min: 1}
    profiles:
      - name: cpu
        engine: vllm
        gpus: 0
        trust_remote_code: true
"""


def test_a_commit_that_trusts_remote_code_waits_under_policy_auto(site: tuple[Path, Path], tmp_path: Path) -> None:
    """`trust_remote_code: true` runs the repository's Python on the host: policy `auto` applies
    what destroys nothing, but not this (before, such a commit was planned and applied at once)."""
    repo, work = site
    ctl = start(work, tmp_path / "runtime", "auto")
    serial = ctl.backend.read().serial
    trusting = commit(repo, {"catalog/trusty.yaml": TRUSTING}, "add trusty, which runs its own code")
    ctl.tick()
    try:
        newest = ctl.runs.all()[0]
        assert (newest.commit, newest.status) == (trusting, "waiting"), (newest.status, newest.summary, newest.log)
        assert ctl.backend.read().serial == serial, "the plan was applied unapproved"
    finally:
        ctl.backend.close()
