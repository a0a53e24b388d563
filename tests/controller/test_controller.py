"""The controller follows a local git repository: a commit that destroys nothing is applied
without a person, one that removes a model waits for approval, both are in the run history
(CLI and admin API)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw.controller import Controller
from llmgw.site import Site
from llmgw.state.select import backend_for
from tests.controller.support import EMPTY, NEW, clone, commit, seed_applied, site_repo
from tests.support.cli import run_cli
from tests.support.operators import admin_client

pytestmark = pytest.mark.postgres


def test_auto_applies_what_destroys_nothing_and_waits_for_approval_otherwise(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seeded = seed_applied(work)
    assert [r.id for r in seeded.replicas] == ["old-1"]
    said: list[str] = []
    ctl = Controller(work, runtime=tmp_path / "runtime", say=said.append)
    api = admin_client(ctl)
    try:
        ctl.tick()
        assert ctl.status.leader
        first = ctl.runs.all()
        assert [(r.status, r.summary) for r in first] == [("no-changes", "No changes. The fleet matches the catalog.")]

        added = commit(repo, {"catalog/new.yaml": NEW}, "add on-demand model new")
        ctl.tick()
        run = ctl.runs.all()[0]
        assert (run.commit, run.status, run.destructive) == (added, "applied", False), run.log
        state = ctl.backend.read()
        assert {m.name for m in state.models} == {"old", "new"} and state.serial == seeded.serial + 1

        removed = commit(repo, {"catalog/old.yaml": None, "hosts.yml": EMPTY}, "remove old and n1")
        ctl.tick()
        waiting = ctl.runs.all()[0]
        assert (waiting.commit, waiting.status, waiting.destructive) == (removed, "waiting", True)
        assert ctl.backend.read().serial == state.serial  # nothing applied without a person
        ctl.tick()
        assert ctl.runs.all()[0].status == "waiting"
        assert api.post("/api/v1/runs/1/approve", json={}).status_code == 409  # not a waiting run

        assert api.post(f"/api/v1/runs/{waiting.id}/approve", json={}).json()["approved_by"] == "tester"
        ctl.tick()
        done = ctl.runs.get(waiting.id)
        assert done.status == "applied" and done.approved_by == "tester", done.log
        assert ctl.backend.read().replicas == []

        listed = json.loads(run_cli("-C", str(work), "controller", "runs", "--json").stdout)["runs"]
        assert [(r["commit"], r["status"]) for r in listed] == [(removed, "applied"), (added, "applied"),
                                                                 (first[0].commit, "no-changes")]
        served = api.get("/api/v1/runs").json()["runs"]
        assert [r["id"] for r in served] == [r["id"] for r in listed] and "plan" not in served[0]
        assert api.get(f"/api/v1/runs/{waiting.id}").json()["plan"]
        assert api.get("/api/v1/controller").json()["leader"] is True
        with backend_for(Site.load(work)) as b:
            history = b.history()
        written = [(h.operation, h.git_commit) for h in history if h.operation == "controller"]
        assert written[0] == ("controller", added) and written[-1] == ("controller", removed)
        assert {c for _o, c in written} == {added, removed}  # every serial says which commit wrote it
    finally:
        ctl.stop()
        ctl.backend.close()


def test_a_newer_commit_supersedes_a_waiting_run(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    ctl = Controller(work, runtime=tmp_path / "runtime", say=lambda _line: None)
    try:
        ctl.tick()
        commit(repo, {"catalog/old.yaml": None, "hosts.yml": EMPTY, "catalog/new.yaml": NEW}, "old -> new")
        ctl.tick()
        waiting = ctl.runs.all()[0]
        assert waiting.status == "waiting", waiting.summary + waiting.log
        commit(repo, {"catalog/new.yaml": NEW.replace("max: 1", "max: 2")}, "new scales to 2")
        ctl.tick()
        assert ctl.runs.get(waiting.id).status == "superseded"
        newest = ctl.runs.all()[0]
        assert newest.status == "waiting", newest.summary + newest.log  # the newer plan still destroys old-1
    finally:
        ctl.stop()
        ctl.backend.close()


def test_status_shows_the_controllers_last_runs(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    assert json.loads(run_cli("-C", str(work), "status", "--json", "--no-router").stdout)["state"][
        "controller_runs"] == []  # no controller ever ran: nothing is created by looking
    ctl = Controller(work, runtime=tmp_path / "runtime", say=lambda _line: None)
    try:
        ctl.tick()
        added = commit(repo, {"catalog/new.yaml": NEW}, "add new")
        ctl.tick()
    finally:
        ctl.stop()
        ctl.backend.close()
    shown = run_cli("-C", str(work), "status", "--no-router").stdout
    assert f"controller run 2 ({added[:12]}): applied" in shown, shown


def test_a_new_leader_finishes_the_run_its_predecessor_left_applying(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    one, two = clone(repo, tmp_path / "one"), clone(repo, tmp_path / "two")
    seed_applied(one)
    first = Controller(one, runtime=tmp_path / "runtime-one", say=lambda _l: None)
    second = Controller(two, runtime=tmp_path / "runtime-two", say=lambda _l: None)
    try:
        first.tick()
        second.tick()
        assert first.status.leader and not second.status.leader
        added = commit(repo, {"catalog/new.yaml": NEW}, "add new")
        # The leader dies between recording the run as applying and writing the state.
        left = first.runs.add(added, "applying", "Plan: 0 to add, 1 to change, 0 to destroy.", False, "", first.name)
        first.stop()
        second.tick()
        assert second.status.leader
        assert second.runs.get(left.id).status == "interrupted"
        newest = second.runs.all()[0]
        assert (newest.commit, newest.status, newest.controller) == (added, "applied", second.name), newest.log
        assert {m.name for m in second.backend.read().models} == {"old", "new"}
    finally:
        for c in (first, second):
            c.stop()
            c.backend.close()


def test_a_person_holding_the_lock_makes_the_controller_wait_not_fail(tmp_path: Path, pg_state: str) -> None:
    from llmgw.state.select import open_backend

    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    ctl = Controller(work, runtime=tmp_path / "runtime", say=lambda _l: None)
    try:
        ctl.tick()
        added = commit(repo, {"catalog/new.yaml": NEW}, "add new")
        with open_backend(pg_state, root=work) as person, person.lock("apply") as held:
            ctl.tick()
            run = ctl.runs.all()[0]
            assert (run.commit, run.status) == (added, "approved") and held.holder in run.log
        ctl.tick()
        assert ctl.runs.get(run.id).status == "applied"
    finally:
        ctl.stop()
        ctl.backend.close()
