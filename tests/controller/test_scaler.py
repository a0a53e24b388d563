"""The controller's demand loop (llmgw.controller.scaler) without hosts: plans and the Applier are
stood in for, so what is tested is its own bookkeeping: one action at a time, each a run with its
reason, the activation's status for the routers, a failed apply or a held lock told as such."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from llmgw.apply import Applier
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.apply.hosts import Progress, RouterView
from llmgw.apply.on_demand_plans import deactivation_plan
from llmgw.controller import Controller
from llmgw.controller import scaler as scaler_mod
from llmgw.controller.api import demand_app
from llmgw.controller.demand import ReplicaLoad, Report
from llmgw.errors import RunnerError
from llmgw.planner import Action, Desired, Plan, Rejection, Summary, Unplaced, make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import LockHeld, LockInfo, Replica, Shard, State, WriteMeta, read_state, write_state
from llmgw.views.demand import demand_view
from tests.apply.test_executor import REPO, Recorder
from tests.controller.support import NEW
from tests.controller.test_demand_api import make_site
from tests.support.operators import admin_client


def replica(rid: str) -> Replica:
    return Replica(id=rid, model="new", profile="cpu", engine="llamacpp", state="ready",
                   endpoint="http://192.0.2.9:20000",
                   shards=[Shard(node="n1", rank=0, port=20000, unit=f"llmgw-{rid}-0.service")])


class FakeApplier:
    """Carries a one-action plan out on the state alone, like the Applier would on hosts."""

    fail: Exception | None = None

    def __init__(self, ctl: Controller, plan: Plan) -> None:
        self.ctl, self.plan = ctl, plan

    def run(self) -> Any:
        if FakeApplier.fail is not None:
            raise FakeApplier.fail
        state = self.ctl.backend.read()
        created = [a.replica or "" for a in self.plan.actions if a.action == "create"]
        destroyed = {a.replica for a in self.plan.actions if a.action == "destroy"}
        reps = [*(r for r in state.replicas if r.id not in destroyed), *map(replica, created)]
        new = self.ctl.backend.write(state.model_copy(update={"replicas": reps}), expect_serial=state.serial,
                                     meta=WriteMeta("test"))
        return type("Outcome", (), {"created": created, "destroyed": sorted(destroyed), "serial": new.serial})()


class Room:
    """How many replicas the stand-in planner can place (None: any number), and what it was asked."""

    left: ClassVar[int | None] = None
    asked: ClassVar[list[int]] = []


@pytest.fixture
def ctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Controller:
    site = make_site(tmp_path / "site")
    c = Controller(site, branch=None, say=lambda _l: None)
    made = iter(range(1, 100))
    Room.left, Room.asked = None, []

    def activation_plan(_inputs: Any, model: str, *, more: bool = False, count: int = 1, **_kw: Any) -> Plan:
        Room.asked.append(count)
        n = count if more else 1
        placed = n if Room.left is None else min(n, Room.left)
        short = [Unplaced(model=model, wanted=n, placed=placed,
                          rejections=[Rejection(profile="cpu", node="n1", reason="n1: 0 of 1 GPUs free")])]
        return Plan(state_serial=0, state_lineage="", summary=Summary(add=placed), desired=Desired(),
                    actions=[Action(action="create", replica=f"{model}-{next(made)}", model=model, code="demand",
                                    reason="test") for _ in range(placed)], unplaced=short if placed < n else [])

    monkeypatch.setattr(scaler_mod, "activation_plan", activation_plan)
    monkeypatch.setattr(scaler_mod, "load_inputs", lambda _site: None)
    monkeypatch.setattr(scaler_mod, "applier_for", lambda _site, plan, **_kw: FakeApplier(c, plan))
    FakeApplier.fail = None
    return c


def report(ctl: Controller, **idle: float) -> None:
    ctl.scaler.reports.add(Report(router="r1", process="1", at=time.monotonic(),
                                  replicas={rid: ReplicaLoad(0, s) for rid, s in idle.items()}))


def test_an_ask_becomes_one_activation_run_and_idle_becomes_a_stop_run(ctl: Controller) -> None:
    for _ in range(3):
        assert ctl.scaler.ask("new", lambda _m: False).status == "pending"
    ctl.demand_tick()
    (run,) = ctl.runs.all()
    assert run.status == "applied"
    assert run.summary == "demand: activate new 0 -> 1 replicas: no replica running and a router asked for it"
    assert ctl.scaler.activation("new").status == "ready"  # type: ignore[union-attr]
    ctl.demand_tick()
    assert len(ctl.runs.all()) == 1  # served: nothing more to do
    # new's idle_timeout is the catalog default (30m): a router reporting it idle that long stops it.
    with ctl.backend.lock("test"):
        s = ctl.backend.read()
        ctl.backend.write(s.model_copy(update={"replicas": [r.model_copy(update={"created_at": None})
                                                            for r in s.replicas]}), expect_serial=s.serial)
    report(ctl, **{"new-1": 1700.0})
    ctl.demand_tick()
    assert len(ctl.runs.all()) == 1  # 1700 s < 1800 s
    report(ctl, **{"new-1": 1801.0})
    ctl.demand_tick()
    stop = ctl.runs.all()[0]
    assert stop.status == "applied" and stop.summary.startswith("demand: stop-idle new 1 -> 0 replicas: no request")
    assert ctl.backend.read().replicas == []
    view = ctl.scaler.view()["models"]["new"]
    assert view["current"] == 0 and view["last_decision"].startswith("stop-idle (run 2)")


def test_the_view_counts_replicas_from_the_state_while_an_apply_still_runs(ctl: Controller) -> None:
    """An apply goes on after it writes the new replica ready (it delivers the state to every
    router, a minute or more in the lab), and the tick is blocked all that time: the view
    counts what the state says, not what the tick saw before the apply."""
    seen: list[int] = []
    run = FakeApplier.run

    def run_and_look(self: FakeApplier) -> Any:
        outcome = run(self)  # the state now records the new replica ready
        seen.append(ctl.scaler.view()["models"]["new"]["current"])  # the apply is still running
        return outcome

    FakeApplier.run = run_and_look  # type: ignore[method-assign]
    try:
        ctl.scaler.ask("new", lambda _m: False)
        ctl.demand_tick()
    finally:
        FakeApplier.run = run  # type: ignore[method-assign]
    assert seen == [1] and ctl.runs.all()[0].status == "applied"


def test_a_scale_up_starts_what_the_load_needs_in_one_run_and_says_when_capacity_cut_it_short(
        ctl: Controller) -> None:
    (ctl.site_dir / "catalog" / "new.yaml").write_text(
        NEW.replace("scaling: {min: 0, max: 1}", "scaling: {min: 1, max: 4, target_in_flight: 2}"))
    with ctl.backend.lock("test"):
        s = ctl.backend.read()
        ctl.backend.write(s.model_copy(update={"replicas": [replica("new-0")]}), expect_serial=s.serial)

    def load(n: int) -> None:
        ctl.scaler.reports.add(Report(router="r1", process="1", at=time.monotonic(),
                                      replicas={"new-0": ReplicaLoad(n, 0.0)}))

    load(7)  # 7 in flight at a target of 2 wants 4 replicas: three more, of which the fleet has room for two
    Room.left = 2
    ctl.demand_tick()
    (run,) = ctl.runs.all()
    assert Room.asked == [3] and run.status == "applied"
    assert run.summary == ("demand: scale-up new 1 -> 3 replicas: 7 in flight/waiting over 1 replica(s), target 2 "
                           "per replica; 4 wanted, no node can take more: n1: 0 of 1 GPUs free")
    # `llmgw models` shows it as the model's last decision (llmgw.views.demand reads the summary).
    shown = demand_view([{"id": run.id, "status": run.status, "summary": run.summary}])["models"]["new"]
    assert (shown["kind"], shown["current"], shown["desired"]) == ("scale-up", 1, 3)
    assert shown["reason"].endswith("4 wanted, no node can take more: n1: 0 of 1 GPUs free")
    assert len(ctl.backend.read().replicas) == 3
    view = ctl.scaler.view()["models"]["new"]
    assert (view["current"], view["desired"]) == (3, 4)
    assert view["last_decision"].startswith("scale-up (run 1): 7 in flight")
    # After the up cooldown (30 s by default; here: as if it had passed) the rest, once there is room.
    ctl.scaler.history.last_action["new"] -= 31
    Room.left = None
    load(7)
    ctl.demand_tick()
    assert Room.asked == [3, 1] and ctl.runs.all()[0].summary.startswith("demand: scale-up new 3 -> 4 replicas: 7 in")
    assert len(ctl.backend.read().replicas) == 4


def test_a_failed_apply_is_a_failed_run_and_the_routers_are_told_why(ctl: Controller) -> None:
    FakeApplier.fail = RunnerError("engines failed on n1")
    ctl.scaler.ask("new", lambda _m: False)
    ctl.demand_tick()
    (run,) = ctl.runs.all()
    assert run.status == "failed" and "engines failed on n1" in run.log
    answer = ctl.scaler.activation("new")
    assert answer is not None and answer.status == "failed" and "engines failed on n1" in answer.reason
    assert ctl.scaler.ask("new", lambda _m: False).status == "failed"  # told for a while, not retried at once


def test_a_held_state_lock_leaves_the_activation_pending(ctl: Controller) -> None:
    FakeApplier.fail = LockHeld("locked", holder=LockInfo("x", "a person's apply", "apply", None, None), hint="")
    ctl.scaler.ask("new", lambda _m: False)
    ctl.demand_tick()
    assert ctl.runs.all()[0].status == "failed" and "a person's apply" in ctl.runs.all()[0].log
    assert ctl.scaler.activation("new").status == "pending"  # type: ignore[union-attr]
    FakeApplier.fail = None
    ctl.demand_tick()
    assert ctl.runs.all()[0].status == "applied" and len(ctl.backend.read().replicas) == 1




def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_admin_api_exports_activations_and_scale_decisions_by_outcome(ctl: Controller,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    admin = admin_client(ctl)
    routers = TestClient(demand_app(ctl, EngineKeyring.beside(Site.load(ctl.site_dir).state_file)))
    assert routers.get("/metrics").status_code == 404  # not on the routers' listener
    FakeApplier.fail = RunnerError("engines failed on n1")
    ctl.scaler.ask("new", lambda _m: False)
    ctl.scaler.ask("ghost", lambda _m: False)  # no such model: refused, counted under "-"
    ctl.demand_tick()
    FakeApplier.fail = None
    monkeypatch.setattr(scaler_mod, "FAILED_KEPT", -1.0)  # the failure's hold-off, over
    ctl.scaler.ask("new", lambda _m: False)
    ctl.demand_tick()
    with ctl.backend.lock("test"):
        s = ctl.backend.read()
        ctl.backend.write(s.model_copy(update={"replicas": [r.model_copy(update={"created_at": None})
                                                            for r in s.replicas]}), expect_serial=s.serial)
    report(ctl, **{"new-2": 1801.0})
    ctl.demand_tick()
    page = admin.get("/metrics")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    got = samples(page.text)
    assert got[("llmgw_activations_total", (("model", "new"), ("outcome", "failed")))] == 1
    assert got[("llmgw_activations_total", (("model", "new"), ("outcome", "started")))] == 1
    assert got[("llmgw_activations_total", (("model", "-"), ("outcome", "refused")))] == 1
    up = (("direction", "up"), ("model", "new"), ("outcome", "applied"), ("reason", "demand"))
    down = (("direction", "down"), ("model", "new"), ("outcome", "applied"), ("reason", "idle"))
    assert got[("llmgw_scale_decisions_total", up)] == 1 and got[("llmgw_scale_decisions_total", down)] == 1
    assert got[("llmgw_activations_in_flight", (("model", "new"),))] == 0
    assert not [k for k in got if k[0] == "llmgw_activations_in_flight" and dict(k[1])["model"] == "ghost"]


def test_demand_runs_deliver_the_state_alone_to_the_routers(ctl: Controller, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """A demand run changes one replica, nothing of the routers' service: the Applier it makes
    sends the routers the state alone, never the full router role (minutes per scale action in
    the lab, which stalled the load ramp), while every other apply checks the service first."""
    asked: list[Any] = []
    monkeypatch.setattr(scaler_mod, "applier_for",
                        lambda _site, plan, **kw: asked.append(kw) or FakeApplier(ctl, plan))
    ctl.scaler.ask("new", lambda _m: False)
    ctl.demand_tick()
    assert [kw.get("routers_installed") for kw in asked] == [True]

    site = Site.load(shutil.copytree(REPO / "inventories" / "example", tmp_path / "example",
                                     ignore=shutil.ignore_patterns("state.json*")))
    for installed, wanted in ((False, [False, False]), (True, [True, True])):
        hosts = StateOnlyRecorder(site)
        plan = make_plan(load_inputs(site))
        Applier(plan=plan, state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
                wheelhouse=lambda: Path("/nonexistent/wheelhouse.tar"), grace=1.0,
                routers_installed=installed).run()
        # Then a plan that takes one replica away: a second delivery, to drain it.
        state = read_state(site.state_file)
        hosts2 = StateOnlyRecorder(site)
        Applier(plan=deactivation_plan(state, state.replicas[0].id), state_file=site.state_file,
                inventory=hosts2.inventory, hosts=hosts2, wheelhouse=lambda: Path("/nonexistent/wheelhouse.tar"),
                grace=1.0, routers_installed=installed).run()
        assert [hosts.state_only[0], hosts2.state_only[0]] == wanted
        assert all(hosts.state_only[1:]) and all(hosts2.state_only[1:])
        write_state(site.state_file, State())  # the next round starts bare


class StateOnlyRecorder(Recorder):
    """tests/apply's recorder of host calls, noting whether each delivery was the state alone."""

    def __init__(self, site: Site) -> None:
        super().__init__(site)
        self.state_only: list[bool] = []

    def deliver(self, state_file: Path, wheelhouse: Path, *, serial: int, present: Sequence[str] = (),
                idle: Sequence[str] = (), timeout: float = 60.0, state_only: bool = False,
                progress: Progress | None = None) -> list[RouterView]:
        self.state_only.append(state_only)
        return super().deliver(state_file, wheelhouse, serial=serial, present=present, idle=idle, timeout=timeout,
                               state_only=state_only, progress=progress)
