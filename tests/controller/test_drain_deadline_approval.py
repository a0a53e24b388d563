"""Policy auto and a drain's deadline: the plan that destroys a replica past its node's deadline
(taking its model below min) waits for a person, and the controller says why; a deadline that
passes under an unchanged commit has that commit planned again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from llmgw.controller import Controller
from llmgw.nodetime import format_time
from tests.controller.support import clone, commit, seed_applied, site_repo
from tests.support.waiting import wait_until

pytestmark = pytest.mark.postgres



def drained(deadline: str) -> str:
    return ("all:\n  children:\n    llmgw_nodes:\n      hosts:\n        n1:\n          ansible_host: 192.0.2.1\n"
            f"          llmgw_node_state: draining\n          llmgw_drain_deadline: \"{deadline}\"\n")


def test_a_destroy_past_a_drain_deadline_waits_for_approval_and_says_why(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    said: list[str] = []
    ctl = Controller(work, runtime=tmp_path / "runtime", say=said.append)
    try:
        ctl.tick()
        done = commit(repo, {"hosts.yml": drained("2000-01-01T00:00:00Z")}, "drain n1, deadline long past")
        ctl.tick()
        run = ctl.runs.all()[0]
        assert (run.commit, run.status, run.destructive) == (done, "waiting", True), run.log
        assert [r.id for r in ctl.backend.read().replicas] == ["old-1"]  # nothing applied without a person
        assert any(line.endswith(f"waits for approval (it destroys (old-1: past a drain deadline, below "
                                 f"scaling.min); `llmgw approve {run.id}`)") for line in said), said
    finally:
        ctl.stop()
        ctl.backend.close()


def test_a_deadline_passing_under_the_same_commit_plans_it_again(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    said: list[str] = []
    ctl = Controller(work, runtime=tmp_path / "runtime", say=said.append)
    try:
        # Far enough ahead that the first two ticks plan before it, even on a loaded machine.
        deadline = (datetime.now(UTC) + timedelta(seconds=15)).replace(microsecond=0)
        done = commit(repo, {"hosts.yml": drained(format_time(deadline))}, "drain n1 for a few seconds")
        ctl.tick()
        first = ctl.runs.all()[0]
        assert (first.commit, first.status) == (done, "no-changes"), first.log  # old-1 stays until then
        ctl.tick()
        assert ctl.runs.all()[0].id == first.id  # nothing due yet: not planned again
        wait_until(lambda: datetime.now(UTC) >= deadline, timeout=30, what=f"the clock to pass {deadline}")
        ctl.tick()
        again = ctl.runs.all()[0]
        assert (again.commit, again.status, again.destructive) == (done, "waiting", True), again.log
        assert f"{done[:12]}: planned again: a drain deadline passed or a node stopped answering" in said
        assert any("past a drain deadline" in line for line in said), said
    finally:
        ctl.stop()
        ctl.backend.close()
