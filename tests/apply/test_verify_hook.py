"""apply's check of new replicas (catalog `requires:`) sits between their start and their
`ready`: a failing check leaves them `starting`, undelivered, for the next plan to replace.

The hosts are a recorder (as in test_executor.py) and the check a function of ours;
the check itself against a real llama-server is in tests/router/test_bench_check.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from llmgw.apply import Applier
from llmgw.apply.hosts import Hosts, Progress, RouterView
from llmgw.errors import RunnerError
from llmgw.inventory import load_inventory
from llmgw.planner import PlannedReplica, make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import read_state

REPO = Path(__file__).resolve().parents[2]


class Recorder(Hosts):
    def __init__(self, site: Site) -> None:
        super().__init__(site.inventory, load_inventory(site.inventory), artifacts=None)
        self.site = site
        self.calls: list[tuple[str, list[tuple[str, str]]]] = []

    @property
    def routers(self) -> list[str]:
        return ["router-1"]

    def _note(self, what: str) -> None:
        self.calls.append((what, [(r.id, r.state) for r in read_state(self.site.state_file).replicas]))

    def engines(self, weights: Mapping[str, list[dict[str, str]]], shards: Mapping[str, list[dict[str, Any]]],
                step: str, progress: Progress | None) -> None:
        self._note(step)

    def deliver(self, state_file: Path, wheelhouse: Path, *, serial: int, present: Sequence[str] = (),
                idle: Sequence[str] = (), timeout: float = 60.0, state_only: bool = False,
                progress: Progress | None = None) -> list[RouterView]:
        self._note("deliver")
        return [RouterView("router-1", True, serial, {r.id: 0 for r in read_state(state_file).replicas})]

    def drain(self, state_file: Path, wheelhouse: Path, *, serial: int, idle: Sequence[str], timeout: float,
              stop: Mapping[str, list[dict[str, Any]]], state_only: bool = False,
              progress: Progress | None = None) -> list[RouterView]:
        # One Ansible run in Hosts: the delivery, then the stop (only once the routers hold the state).
        views = self.deliver(state_file, wheelhouse, serial=serial, idle=idle, timeout=timeout,
                             state_only=state_only, progress=progress)
        self.engines({}, stop, "stop", progress)
        return views


@pytest.fixture
def site(tmp_path: Path) -> Site:
    shutil.copytree(REPO / "inventories" / "example", tmp_path / "site", ignore=shutil.ignore_patterns("state.json*"))
    return Site.load(tmp_path / "site")


def test_a_failed_check_leaves_new_replicas_starting_and_undelivered(site: Site) -> None:
    plan = make_plan(load_inputs(site))
    hosts = Recorder(site)
    checked: list[list[str]] = []

    def verify(replicas: Sequence[PlannedReplica]) -> None:
        checked.append([r.id for r in replicas])
        hosts._note("verify")
        raise RunnerError("new replicas lack capabilities their models require", detail=["x-1: tools: fail: ..."])

    applier = Applier(plan=plan, state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
                      wheelhouse=lambda: Path("/nonexistent"), grace=1.0, verify=verify)
    with pytest.raises(RunnerError, match="lack capabilities"):
        applier.run()
    assert [c[0] for c in hosts.calls] == ["start", "verify"]  # checked after the start, nothing delivered
    assert checked and {s for _i, s in hosts.calls[1][1]} == {"starting"}
    state = read_state(site.state_file)
    assert state.replicas and {r.state for r in state.replicas} == {"starting"}
    # The next plan replaces what failed its check, as any replica left starting.
    again = make_plan(load_inputs(site))
    assert {a.replica for a in again.actions if a.action == "destroy"} == {r.id for r in state.replicas}


def test_a_passing_check_comes_before_ready(site: Site) -> None:
    hosts = Recorder(site)
    applier = Applier(plan=make_plan(load_inputs(site)), state_file=site.state_file, inventory=hosts.inventory,
                      hosts=hosts, wheelhouse=lambda: Path("/nonexistent"), grace=1.0,
                      verify=lambda replicas: hosts._note("verify"))
    applier.run()
    assert [c[0] for c in hosts.calls][:3] == ["start", "verify", "deliver"]
    assert {s for _i, s in hosts.calls[1][1]} == {"starting"} and {s for _i, s in hosts.calls[2][1]} == {"ready"}
