"""Two controllers on one PostgreSQL state, each a real `llmgw controller run` process with its
own clone of the site's repository: exactly one leads and applies; after `kill -9` of the
leader the other takes over once the lease runs out, and applies the commits that follow;
a leader killed in the middle of an apply leaves its run to the survivor, which finishes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from llmgw.state import PostgresBackend
from tests.controller.support import NEW, clone, commit, seed_applied, site_repo
from tests.support.net import free_port
from tests.support.waiting import stop_process, wait_until

pytestmark = pytest.mark.postgres

LEASE = 2.0
INTERVAL = 0.3


class Running:
    def __init__(self, site: Path, log: Path) -> None:
        self.port = free_port()
        self.log = log
        env = {**os.environ, "LLMGW_STATE_LEASE": str(LEASE)}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "llmgw"), "-C", str(site), "controller", "run",
                 "--interval", str(INTERVAL), "--listen", f"127.0.0.1:{self.port}",
                 "--runtime-dir", str(log.with_suffix(".runtime"))],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def status(self) -> dict[str, Any] | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"controller exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/api/v1/controller", timeout=2).json()  # type: ignore[no-any-return]
        except httpx.HTTPError:
            return None

    def runs(self) -> list[dict[str, Any]]:
        return httpx.get(f"http://127.0.0.1:{self.port}/api/v1/runs", timeout=10).json()["runs"]  # type: ignore[no-any-return]

    def runs_now(self) -> list[dict[str, Any]]:
        """For polling: a controller too busy to answer within the wait's step has no runs yet
        (seen in CI: its API took over 2 s while its apply started beside two test workers)."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/api/v1/runs", timeout=2).json()["runs"]  # type: ignore[no-any-return]
        except httpx.HTTPError:
            return []

    def stop(self) -> None:
        stop_process(self.proc, 15)


@pytest.fixture
def controllers(tmp_path: Path, pg_state: str) -> Iterator[tuple[Path, list[Running]]]:
    repo = site_repo(tmp_path, pg_state)
    one, two = clone(repo, tmp_path / "bastion-1"), clone(repo, tmp_path / "bastion-2")
    seed_applied(one)
    running = [Running(one, tmp_path / "c1.log"), Running(two, tmp_path / "c2.log")]
    yield repo, running
    for r in running:
        r.stop()


def test_one_leader_applies_and_a_survivor_takes_over_after_kill_9(controllers: tuple[Path, list[Running]]) -> None:
    repo, (c1, c2) = controllers

    def statuses() -> list[dict[str, Any]] | None:
        got = [c1.status(), c2.status()]
        return got if all(got) else None  # type: ignore[return-value]

    def one_leader() -> list[dict[str, Any]] | None:
        got = statuses()
        return got if got and sum(s["leader"] for s in got) == 1 and all(s["last_commit"] or not s["leader"]
                                                                          for s in got) else None

    views = wait_until(one_leader, 30, "one controller to lead")
    leader, standby = (c1, c2) if views[0]["leader"] else (c2, c1)
    assert views[0 if standby is c1 else 1]["holder"] == views[0 if leader is c1 else 1]["name"]

    added = commit(repo, {"catalog/new.yaml": NEW}, "add on-demand model new")
    wait_until(lambda: any(r["commit"] == added and r["status"] == "applied" for r in leader.runs_now()), 30,
             "the leader to apply the commit")
    runs = leader.runs()
    assert [r["commit"] for r in runs].count(added) == 1  # planned and applied once, by one controller
    assert {r["controller"] for r in runs} == {views[0 if leader is c1 else 1]["name"]}

    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    killed_at = time.monotonic()
    wait_until(lambda: (standby.status() or {}).get("leader"), 6 * LEASE, "the standby to take over")
    took = time.monotonic() - killed_at
    print(f"takeover after kill -9: {took:.1f} s (lease {LEASE} s, interval {INTERVAL} s)")

    scaled = commit(repo, {"catalog/new.yaml": NEW.replace("max: 1", "max: 2")}, "new scales to 2")
    wait_until(lambda: any(r["commit"] == scaled and r["status"] == "applied" for r in standby.runs_now()), 30,
             "the survivor to apply the next commit")
    survivor = standby.status()
    assert survivor is not None and survivor["name"] in {r["controller"] for r in standby.runs()}


def test_the_survivor_finishes_the_run_a_leader_killed_mid_apply_left(controllers: tuple[Path, list[Running]],
                                                                       pg_state: str) -> None:
    repo, (c1, c2) = controllers
    views = wait_until(lambda: next((v for v in ([c1.status(), c2.status()]) if v and v["leader"] and
                                     v["last_commit"]), None), 90, "one controller to lead")
    leader, standby = (c1, c2) if (c1.status() or {}).get("name") == views["name"] else (c2, c1)
    password = os.environ["LLMGW_STATE_PASSWORD"]
    # The test holds the state's head row: the leader's apply blocks at its first write, with
    # its run `applying` and the state lock held: the middle of an apply, made to last.
    with psycopg.connect(pg_state, password=password) as hold:
        hold.execute("SELECT serial FROM llmgw_state_head WHERE id = 1 FOR UPDATE")
        added = commit(repo, {"catalog/new.yaml": NEW}, "add on-demand model new")
        wait_until(lambda: any(r["commit"] == added and r["status"] == "applying" for r in leader.runs_now()), 30,
                   "the leader to start applying the commit")
        with PostgresBackend(pg_state, password=password) as look:
            held = wait_until(look.lock_info, 10, "the leader's apply to hold the state lock")
            assert held.operation.startswith("controller run"), held
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait(10)
        hold.rollback()
    wait_until(lambda: any(r["commit"] == added and r["status"] == "applied" for r in standby.runs_now()), 60,
               "the survivor to finish the commit the leader left")
    runs = standby.runs()
    left = [r for r in runs if r["commit"] == added and r["controller"] == views["name"]]
    assert [r["status"] for r in left] == ["interrupted"], runs  # the leader's run, marked by the survivor
    finished = [r for r in runs if r["commit"] == added and r["status"] == "applied"]
    assert len(finished) == 1 and finished[0]["controller"] != views["name"], runs
    with PostgresBackend(pg_state, password=password) as look:
        state = look.read()
        assert "new" in {m.name for m in state.models}, state.models  # the leader's unfinished change is in
        assert look.lock_info() is None  # the dead leader's lock ran out; the survivor released its own
        assert [h.operation for h in look.history()][-1] == "controller"
