"""llmgw.idle: the one definition of "idle" that `llmgw status` and the controller's scaler share."""

from __future__ import annotations

import pytest

from llmgw.controller.demand import History, ModelDemand, ReplicaLoad, Report, decide, fleet_view
from llmgw.idle import idle_verdict, quiet_seconds


@pytest.mark.parametrize(("since_use", "watched", "age", "verdict"), [
    (None, 7200.0, 86400.0, "idle"),  # never used in the 2 h a router watched it
    (4000.0, 7200.0, 86400.0, "idle"),
    (60.0, 7200.0, 86400.0, "not idle"),  # used a minute ago
    (None, 7200.0, 600.0, "not idle"),  # ten minutes old
    (None, 10.0, 172800.0, "not known yet"),  # the router restarted 10 s ago: not "never used in 2d"
    (9000.0, 10.0, 172800.0, "not known yet"),  # used long ago by a router that has since restarted
    (None, None, 172800.0, "not known yet"),  # no router watches it
])
def test_verdicts(since_use: float | None, watched: float | None, age: float | None, verdict: str) -> None:
    assert idle_verdict(since_use, watched, age, 3600) == verdict


def test_quiet_is_bounded_by_watching_and_age() -> None:
    assert quiet_seconds(None, 10.0, 172800.0) == 10.0
    assert quiet_seconds(5000.0, 7200.0, 600.0) == 600.0
    assert quiet_seconds(5000.0, None, 600.0) is None


def test_the_scaler_stops_only_what_the_routers_watched_idle() -> None:
    """The scaler's stop-idle goes by the same function: a replica no router reports was
    watched by none, so it is not stopped on its age alone (before: idle by its record's age)."""
    m = ModelDemand(name="m", min=0, max=1, idle_timeout=60, target_in_flight=None, up_cooldown=10,
                    down_cooldown=30, ready=("m-1",), age_s={"m-1": 86400.0})
    silent = fleet_view([Report(router="r1", process="1", at=0.0)], ("r1",))
    assert decide(m, silent, History(), 0.0)[0] is None
    watched = fleet_view([Report(router="r1", process="1", at=0.0, replicas={"m-1": ReplicaLoad(0, 61.0)})], ("r1",))
    stop = decide(m, watched, History(), 0.0)[0]
    assert stop is not None and (stop.kind, stop.replica) == ("stop-idle", "m-1")
