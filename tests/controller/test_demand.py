"""The controller's demand decisions (llmgw.controller.demand): pure functions, time passed in."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.controller.demand import (
    ForgedReport,
    History,
    ModelDemand,
    ReplicaLoad,
    Report,
    ReportError,
    Reports,
    decide,
    desired_count,
    fleet_view,
    parse_report,
)
from llmgw.controller.scaler import Scaler

ROUTERS = ("r1", "r2")


def demand(**kw: Any) -> ModelDemand:
    base: dict[str, Any] = {"name": "m", "min": 0, "max": 3, "idle_timeout": 60, "target_in_flight": 4,
                            "up_cooldown": 10, "down_cooldown": 30, "ready": ("m-1",), "age_s": {"m-1": 1000.0}}
    return ModelDemand(**{**base, **kw})


def report(router: str, at: float = 0.0, *, in_flight: dict[str, int] | None = None, idle: float = 0.0,
           waiting: int = 0) -> Report:
    loads = {rid: ReplicaLoad(n, 0.0 if n else idle) for rid, n in (in_flight or {"m-1": 0}).items()}
    return Report(router=router, process="1", at=at, replicas=loads, waiting={"m": waiting} if waiting else {},
                  model_idle_s={"m": idle})


def fleet(*reports: Report, routers: tuple[str, ...] = ROUTERS) -> Any:
    return fleet_view(reports, routers)


def test_a_cold_model_is_activated_when_asked_or_waited_for_and_only_then() -> None:
    cold = demand(ready=(), age_s={})
    quiet = fleet(report("r1", in_flight={}), report("r2", in_flight={}))
    assert decide(cold, quiet, History(), 0.0)[0] is None
    asked, _ = decide(cold, quiet, History(), 0.0, asked=True)
    assert asked is not None and (asked.kind, asked.desired) == ("activate", 1)
    waited, _ = decide(cold, fleet(report("r1", in_flight={}, waiting=3)), History(), 0.0)
    assert waited is not None and waited.kind == "activate" and "3 request(s) waiting" in waited.reason
    starting, why = decide(demand(ready=(), starting=("m-1",)), quiet, History(), 0.0, asked=True)
    assert starting is None and "starting" in why  # one activation, however many asks


def test_one_activation_for_many_asks() -> None:
    scaler = Scaler(runs=None, backend=None, name="t", grace=1, say=lambda _l: None)  # type: ignore[arg-type]
    answers = [scaler.ask("m", lambda _m: False) for _ in range(10)]
    assert {a.status for a in answers} == {"pending"} and len(scaler.activations()) == 1
    assert scaler.wake.is_set()
    assert scaler.ask("other", lambda _m: True).status == "ready"  # already running: nothing to start


def test_load_above_the_target_scales_up_to_what_it_needs_at_once_after_the_cooldown() -> None:
    m = demand(min=1)
    busy = fleet(report("r1", in_flight={"m-1": 5}), report("r2", in_flight={"m-1": 2}))
    h = History()
    d, _ = decide(m, busy, h, 100.0)
    assert d is not None and (d.kind, d.current, d.desired) == ("scale-up", 1, 2)  # 7 at target 4: two
    assert "7 in flight/waiting" in d.reason
    # 9 at target 4 needs three: one action for both replicas more, not one each a cooldown apart.
    burst = fleet(report("r1", in_flight={"m-1": 5}), report("r2", in_flight={"m-1": 4}))
    d3, _ = decide(m, burst, History(), 100.0)
    assert d3 is not None and (d3.kind, d3.current, d3.desired) == ("scale-up", 1, 3)
    flood, _ = decide(m, fleet(report("r1", in_flight={"m-1": 50}), report("r2")), History(), 0.0)
    assert flood is not None and flood.desired == 3  # max (3) bounds it
    h.last_action["m"] = 100.0
    m2 = demand(min=1, ready=("m-1", "m-2"))
    busier = fleet(report("r1", in_flight={"m-1": 6, "m-2": 6}), report("r2", in_flight={"m-1": 1}))
    held, why = decide(m2, busier, h, 105.0)
    assert held is None and "up cooldown" in why and "scale up to 3" in why
    d2, _ = decide(m2, busier, h, 111.0)
    assert d2 is not None and (d2.kind, d2.current, d2.desired) == ("scale-up", 2, 3)
    at_max = demand(min=1, ready=("m-1", "m-2", "m-3"))
    assert decide(at_max, fleet(report("r1", in_flight={"m-1": 50}), report("r2")), h, 200.0)[0] is None
    assert desired_count(at_max, 50) == 3  # max bounds it


def test_scale_down_waits_for_the_load_to_fit_below_the_hysteresis_for_the_whole_cooldown() -> None:
    m = demand(min=1, ready=("m-1", "m-2", "m-3"), age_s={})
    h = History()
    # 8 in flight fits 2 replicas at target 4, but not with the 0.7 margin (5.6): steady.
    steady, why = decide(m, fleet(report("r1", in_flight={"m-1": 4, "m-2": 4, "m-3": 0}), report("r2")), h, 0.0)
    assert steady is None and "steady" in why
    low = fleet(report("r1", in_flight={"m-1": 2, "m-2": 1, "m-3": 0}), report("r2", in_flight={"m-1": 1}))
    assert decide(m, low, h, 0.0)[0] is None  # the quiet period starts
    assert decide(m, low, h, 29.0)[0] is None
    down, _ = decide(m, low, h, 31.0)
    assert down is not None and (down.kind, down.replica, down.desired) == ("scale-down", "m-3", 2)
    # A burst in between restarts the quiet period.
    h2 = History()
    decide(m, low, h2, 0.0)
    decide(m, fleet(report("r1", in_flight={"m-1": 9, "m-2": 0, "m-3": 0}), report("r2")), h2, 10.0)
    assert decide(m, low, h2, 31.0)[0] is None


def test_never_below_min_nor_down_while_a_router_is_not_known() -> None:
    at_min = demand(min=2, ready=("m-1", "m-2"))
    assert decide(at_min, fleet(report("r1", in_flight={}), report("r2", in_flight={})), History(), 1e6)[0] is None
    m = demand(min=1, ready=("m-1", "m-2"), age_s={})
    h = History()
    only_r1 = fleet(report("r1", in_flight={"m-1": 0, "m-2": 0}))
    none, why = decide(m, only_r1, h, 0.0)
    assert none is None and "r2" in why and "not known" in why
    assert decide(m, only_r1, h, 1e6)[0] is None


def test_idle_stop_needs_every_router_to_report_no_request_for_idle_timeout() -> None:
    m = demand()
    both_idle = fleet(report("r1", idle=61), report("r2", idle=100))
    stop, _ = decide(m, both_idle, History(), 0.0)
    assert stop is not None and (stop.kind, stop.replica, stop.desired) == ("stop-idle", "m-1", 0)
    # Traffic through the second router keeps it.
    assert decide(m, fleet(report("r1", idle=100), report("r2", idle=5)), History(), 0.0)[0] is None
    # A router that does not answer is not known, never idle.
    kept, why = decide(m, fleet(report("r1", idle=100)), History(), 0.0)
    assert kept is None and "not known" in why
    # A replica just started (not yet seen by routers) is as old as its record.
    young = demand(age_s={"m-1": 10.0})
    assert decide(young, fleet(report("r1", in_flight={}, idle=100), report("r2", in_flight={}, idle=100)),
                  History(), 0.0)[0] is None


def test_reports_go_stale_and_a_router_counts_while_one_of_its_processes_is_fresh() -> None:
    book = Reports(stale_after=5)
    book.add(report("r1", at=0.0))
    book.add(Report(router="r1", process="2", at=3.0))
    book.add(report("r2", at=0.0))
    assert {r.router for r in book.fresh(4.0)} == {"r1", "r2"}
    assert fleet_view(book.fresh(7.0), ROUTERS).unknown == ("r2",)


@pytest.mark.parametrize("bad", [
    [], {"router": ""}, {"router": "r", "replicas": {"x": {"in_flight": -1}}},
    {"router": "r", "replicas": {"x": {"in_flight": True}}}, {"router": "r", "waiting": {"m": "lots"}},
    {"router": "r", "replicas": []}, {"router": "r\x00"}, {"router": "r", "model_idle_s": {"m": float("nan")}},
    {"router": "r", "process": "p\n"},
])
def test_a_hostile_report_is_refused_with_what_is_wrong(bad: Any) -> None:
    with pytest.raises(ReportError) as refused:
        parse_report(bad, 0.0, "r")
    assert refused.value.message


def test_a_report_parses_under_its_credentials_router() -> None:
    r = parse_report({"router": "node1", "process": "42", "serial": 7,
                      "replicas": {"m-1": {"in_flight": 3, "idle_s": 0.5}}, "waiting": {"m": 2},
                      "model_idle_s": {"m": 0.1}}, 9.0, "node1")
    assert (r.router, r.process, r.serial, r.at) == ("node1", "42", 7, 9.0)
    assert r.replicas["m-1"] == ReplicaLoad(3, 0.5) and r.waiting == {"m": 2}
    assert parse_report({"process": "1"}, 0.0, "node1").router == "node1"  # no name: the credential's
    with pytest.raises(ForgedReport):
        parse_report({"router": "node2"}, 0.0, "node1")


def test_a_router_gone_from_the_inventory_counts_for_nothing() -> None:
    gone = report("r9", in_flight={"m-1": 50})
    seen = fleet(report("r1"), report("r2"), gone)
    assert seen.in_flight == {"m-1": 0} and seen.unknown == ()


def test_one_router_holds_a_bounded_share_and_old_processes_expire() -> None:
    book = Reports(stale_after=5, per_router=3, per_router_bytes=1000)
    book.add(Report(router="r2", process="1", at=0.0), 100)
    for n in range(50):  # r1 restarting workers, or lying about them
        book.add(Report(router="r1", process=str(n), at=float(n) / 100), 10)
    assert book.held() == {"r1": (3, 30), "r2": (1, 100)}
    assert sorted(r.process for r in book.fresh(1.0) if r.router == "r1") == ["47", "48", "49"]  # the newest
    book.add(Report(router="r1", process="big", at=1.0), 995)  # bytes: the older ones give way
    assert book.held()["r1"] == (1, 995) and book.held()["r2"] == (1, 100)
    book.add(Report(router="r1", process="late", at=25.0), 10)  # 4 x stale_after later: "big" is gone
    assert book.held()["r1"] == (1, 10)
    assert [r.router for r in book.fresh(25.0)] == ["r1"]  # r2's report expired too
