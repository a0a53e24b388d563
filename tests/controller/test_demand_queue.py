"""Scaling that knows the queue (llmgw.controller.demand): a batch backlog and a long wait in
a router's queue scale a model up; neither holds a replica once it is gone. Reports' new
fields are hostile input like the rest."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.controller.demand import (
    SATURATED_WAIT,
    History,
    ModelDemand,
    ReplicaLoad,
    Report,
    ReportError,
    decide,
    fleet_view,
    parse_report,
)

ROUTERS = ("r1", "r2")


def demand(**kw: Any) -> ModelDemand:
    base: dict[str, Any] = {"name": "m", "min": 0, "max": 3, "idle_timeout": 60, "target_in_flight": 4,
                            "up_cooldown": 10, "down_cooldown": 30, "ready": ("m-1",), "age_s": {"m-1": 1000.0}}
    return ModelDemand(**{**base, **kw})


def report(router: str, *, in_flight: dict[str, int] | None = None, idle: float = 0.0, backlog: int = 0,
           queue_wait: float | None = None, waiting: int = 0) -> Report:
    loads = {rid: ReplicaLoad(n, 0.0 if n else idle) for rid, n in (in_flight or {"m-1": 0}).items()}
    return Report(router=router, process="1", at=0.0, replicas=loads, waiting={"m": waiting} if waiting else {},
                  model_idle_s={"m": idle}, backlog={"m": backlog} if backlog else {},
                  queue_wait_s={"m": queue_wait} if queue_wait is not None else {})


def fleet(*reports: Report) -> Any:
    return fleet_view(reports, ROUTERS)


def test_a_batch_backlog_starts_a_cold_model_and_scales_it_to_what_it_needs() -> None:
    cold = demand(ready=(), age_s={})
    started, _ = decide(cold, fleet(report("r1", in_flight={}, backlog=40), report("r2", in_flight={})),
                        History(), 0.0)
    assert started is not None and started.kind == "activate" and "40 batch request(s) not sent" in started.reason
    # One replica running 4 batch requests (the router sends a few at a time), 8 more not sent:
    # in flight alone fits the target; with the backlog it needs three.
    busy = fleet(report("r1", in_flight={"m-1": 4}, backlog=8), report("r2"))
    up, _ = decide(demand(), busy, History(), 0.0)
    assert up is not None and (up.kind, up.desired) == ("scale-up", 3)
    assert "8 of them batch requests not sent yet" in up.reason
    without, _ = decide(demand(), fleet(report("r1", in_flight={"m-1": 4}), report("r2")), History(), 0.0)
    assert without is None  # the same in flight without the backlog: steady


def test_a_backlog_never_holds_a_replica_once_it_is_done() -> None:
    two = demand(ready=("m-1", "m-2"), age_s={"m-1": 1000.0, "m-2": 1000.0})
    history = History()
    loaded = fleet(report("r1", in_flight={"m-1": 1, "m-2": 1}, backlog=4), report("r2"))
    held, why = decide(two, loaded, history, 0.0)
    assert held is None and "steady" in why
    done = fleet(report("r1", in_flight={"m-1": 0, "m-2": 0}), report("r2"))
    assert decide(two, done, history, 1.0)[0] is None  # the down cooldown starts now
    down, _ = decide(two, done, history, 1.0 + 30)
    assert down is not None and down.kind == "scale-down"
    # The last replica of a min-0 model stops when idle, and not while a backlog is reported.
    idle_backlog = fleet(report("r1", idle=120, backlog=3), report("r2", idle=120))
    assert decide(demand(), idle_backlog, History(), 0.0)[0] is None
    idle = fleet(report("r1", idle=120), report("r2", idle=120))
    stop, _ = decide(demand(), idle, History(), 0.0)
    assert stop is not None and stop.kind == "stop-idle"


def test_a_long_wait_in_a_routers_queue_adds_a_replica_whatever_the_target_says() -> None:
    # Two in flight on one replica is under the target of 4, but the replica holds two at
    # once (its max_in_flight) and requests have waited: it is saturated.
    slow = fleet(report("r1", in_flight={"m-1": 2}, waiting=1, queue_wait=SATURATED_WAIT + 1), report("r2"))
    up, _ = decide(demand(), slow, History(), 0.0)
    assert up is not None and (up.kind, up.current, up.desired) == ("scale-up", 1, 2)
    assert "waited" in up.reason and "saturated" in up.reason
    brief = fleet(report("r1", in_flight={"m-1": 2}, waiting=1, queue_wait=1.0), report("r2"))
    assert decide(demand(), brief, History(), 0.0)[0] is None
    at_max, _ = decide(demand(max=1), slow, History(), 0.0)
    assert at_max is None  # never past max
    # Nor is a replica drained while requests wait that long.
    two = demand(ready=("m-1", "m-2"), age_s={"m-1": 1000.0, "m-2": 1000.0})
    history = History()
    waiting = fleet(report("r1", in_flight={"m-1": 1, "m-2": 0}, waiting=1, queue_wait=SATURATED_WAIT),
                    report("r2"))
    for now in (0.0, 100.0):
        held, why = decide(two, waiting, history, now)
        assert held is None or held.kind == "scale-up", why


def test_the_longest_wait_and_the_sum_of_backlogs_over_routers() -> None:
    seen = fleet(report("r1", backlog=5, queue_wait=3.0), report("r2", backlog=7, queue_wait=12.5))
    assert seen.backlog == {"m": 12} and seen.queue_wait_s == {"m": 12.5}


@pytest.mark.parametrize("bad", [
    {"backlog": {"m": -1}}, {"backlog": {"m": 2.5}}, {"backlog": {"m": True}}, {"backlog": []},
    {"backlog": {"": 1}}, {"queue_wait_s": {"m": float("inf")}}, {"queue_wait_s": {"m": "long"}},
    {"queue_wait_s": {"m\n": 1.0}}, {"queue_wait_s": {"m": -0.5}}, {"waiting": {"m": 1.5}},
])
def test_hostile_queue_fields_are_refused_with_what_is_wrong(bad: dict[str, Any]) -> None:
    with pytest.raises(ReportError) as refused:
        parse_report({"router": "r", **bad}, 0.0, "r")
    assert refused.value.message


def test_the_queue_fields_parse_and_are_optional() -> None:
    r = parse_report({"router": "r", "backlog": {"m": 40}, "queue_wait_s": {"m": 2.5}, "waiting": {"m": 3.0}},
                     0.0, "r")
    assert (r.backlog, r.queue_wait_s, r.waiting) == ({"m": 40}, {"m": 2.5}, {"m": 3})
    old = parse_report({"router": "r"}, 0.0, "r")  # a router from before the fields existed
    assert (old.backlog, old.queue_wait_s) == ({}, {})
