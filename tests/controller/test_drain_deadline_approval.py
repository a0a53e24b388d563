"""Policy auto and a drain's deadline: the plan that destroys a replica past its node's deadline
(taking its model below min) waits for a person, and the controller says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.controller import Controller
from tests.controller.support import clone, commit, seed_applied, site_repo

pytestmark = pytest.mark.postgres

DRAINED = ("all:\n  children:\n    llmgw_nodes:\n      hosts:\n        n1:\n          ansible_host: 192.0.2.1\n"
           "          llmgw_node_state: draining\n          llmgw_drain_deadline: \"2000-01-01T00:00:00Z\"\n")


def test_a_destroy_past_a_drain_deadline_waits_for_approval_and_says_why(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    said: list[str] = []
    ctl = Controller(work, runtime=tmp_path / "runtime", say=said.append)
    try:
        ctl.tick()
        drained = commit(repo, {"hosts.yml": DRAINED}, "drain n1, deadline long past")
        ctl.tick()
        run = ctl.runs.all()[0]
        assert (run.commit, run.status, run.destructive) == (drained, "waiting", True), run.log
        assert [r.id for r in ctl.backend.read().replicas] == ["old-1"]  # nothing applied without a person
        assert any(line.endswith(f"waits for approval (it destroys (old-1: past a drain deadline, below "
                                 f"scaling.min); `llmgw approve {run.id}`)") for line in said), said
    finally:
        ctl.stop()
        ctl.backend.close()
