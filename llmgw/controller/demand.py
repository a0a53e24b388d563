"""Demand: what the routers report, and what the controller decides from it (pure functions).

Routers report to the controller (docs/demand.md): every few seconds each router process
POSTs, per replica, its requests in flight and the seconds since its last request, and per
model the requests it holds waiting (for a replica, or in its admission queue), how long the
longest of those has waited, and its batches' requests not sent yet. The controller keeps the newest report
of each (router, process) in a `Reports` book and decides, from all of them together:

- **activate**: a model with no ready or starting replica that a router asked for, or
  that has requests waiting or a batch backlog;
- **scale up**: a model whose load (in flight + waiting + batch requests not sent yet,
  summed over every router) is above `target_in_flight` per replica, below `max`, outside
  its `up_cooldown`: to as many replicas as the load needs at the target (at most `max`),
  in one action; or, whatever the load, one more when a request has waited
  `SATURATED_WAIT` seconds in a router's queue (the replicas hold all they take). Only
  where the fleet has room: the plan places what fits and says why not the rest;
- **scale down**: a model whose load has fitted into one replica fewer (at the target,
  with a hysteresis margin) for its whole `down_cooldown`, above `min`: the least busy
  replica is drained;
- **stop idle**: a replica of a `min: 0` model on which no router has had a request for
  `idle_timeout`, with nothing waiting and no batch backlog.

A backlog holds replicas up only while it lasts: routers report what is not sent yet, the
last request of a batch sent is the end of it, and the usual idle and down rules follow.

A router of the inventory with no fresh report is *not known*: while one is not known,
nothing is scaled down or stopped (its traffic may be what keeps a replica busy).
Everything here is a pure function of its arguments, with time passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from llmgw.controller.reports import (
    MAX_BYTES_PER_ROUTER,
    MAX_PROCESSES_PER_ROUTER,
    STALE_AFTER,
    ForgedReport,
    ReplicaLoad,
    Report,
    ReportError,
    Reports,
    parse_report,
)
from llmgw.idle import idle_verdict

# The reports' side (llmgw.controller.reports), named here too: callers read demand as one noun.
__all__ = ["HYSTERESIS", "MAX_BYTES_PER_ROUTER", "MAX_PROCESSES_PER_ROUTER", "SATURATED_WAIT", "STALE_AFTER",
           "Decision", "Fleet", "ForgedReport", "History", "ModelDemand", "ReplicaLoad", "Report", "ReportError",
           "Reports", "decide", "desired_count", "fleet_view", "load_of", "parse_report", "saturated"]

# Scale down only when the load fits `current - 1` replicas at this share of the target,
# so a load just under the target does not flap between two counts.
HYSTERESIS = 0.7
# A request that has waited this long (seconds) in a router's queue means the replicas are
# full (the routers hold what is beyond their max_in_flight), whatever in flight says of the
# target: one more replica, and none drained while it lasts.
SATURATED_WAIT = 10.0

Kind = Literal["activate", "scale-up", "scale-down", "stop-idle"]


@dataclass(frozen=True)
class ModelDemand:
    """A model's scaling as the catalog says, and its replicas as the state records them."""

    name: str
    min: int
    max: int
    idle_timeout: float
    target_in_flight: int | None
    up_cooldown: float
    down_cooldown: float
    ready: tuple[str, ...] = ()  # replica ids
    starting: tuple[str, ...] = ()
    # Seconds since each ready replica was recorded (created), for "never used" replicas.
    age_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Fleet:
    """What all routers report together: per replica and model, summed; `unknown` routers
    (in the inventory, no fresh report) make idleness and low load unknowable."""

    in_flight: Mapping[str, int]
    idle_s: Mapping[str, float]  # replica -> seconds since any router's last request on it
    waiting: Mapping[str, int]
    model_idle_s: Mapping[str, float]
    unknown: tuple[str, ...]
    queue_wait_s: Mapping[str, float] = field(default_factory=dict)  # model -> the longest any router's waiter waited
    backlog: Mapping[str, int] = field(default_factory=dict)  # model -> batch requests not sent, summed


def fleet_view(reports: Iterable[Report], routers: Iterable[str]) -> Fleet:
    in_flight: dict[str, int] = {}
    idle: dict[str, float] = {}
    waiting: dict[str, int] = {}
    model_idle: dict[str, float] = {}
    queue_wait: dict[str, float] = {}
    backlog: dict[str, int] = {}
    seen: set[str] = set()
    known = set(routers)
    for r in reports:
        if r.router not in known:
            continue  # a router gone from the inventory (its token still verifies until the secret changes)
        seen.add(r.router)
        for rid, load in r.replicas.items():
            in_flight[rid] = in_flight.get(rid, 0) + load.in_flight
            idle[rid] = min(idle.get(rid, math.inf), load.idle_s)
        for m, n in r.waiting.items():
            waiting[m] = waiting.get(m, 0) + n
        for m, s in r.model_idle_s.items():
            model_idle[m] = min(model_idle.get(m, math.inf), s)
        for m, s in r.queue_wait_s.items():
            queue_wait[m] = max(queue_wait.get(m, 0.0), s)
        for m, n in r.backlog.items():
            backlog[m] = backlog.get(m, 0) + n
    return Fleet(in_flight, idle, waiting, model_idle, tuple(sorted(known - seen)), queue_wait, backlog)


@dataclass(frozen=True)
class Decision:
    model: str
    kind: Kind
    reason: str
    replica: str | None = None  # the replica to drain (scale-down, stop-idle)
    current: int = 0
    desired: int = 0


@dataclass
class History:
    """When each model was last scaled, and since when its load has fitted one replica fewer."""

    last_action: dict[str, float] = field(default_factory=dict)
    low_since: dict[str, float] = field(default_factory=dict)


def load_of(m: ModelDemand, fleet: Fleet) -> int:
    """Requests in flight, waiting in the routers, and not yet sent of the batches they run."""
    return sum(fleet.in_flight.get(r, 0) for r in (*m.ready, *m.starting)) + fleet.waiting.get(m.name, 0) \
        + fleet.backlog.get(m.name, 0)


def saturated(m: ModelDemand, fleet: Fleet) -> bool:
    """Requests have waited in a router's queue for `SATURATED_WAIT` seconds: the replicas
    hold all they take (their `max_in_flight`, the engine's slots) whatever the target says."""
    return fleet.queue_wait_s.get(m.name, 0.0) >= SATURATED_WAIT


def desired_count(m: ModelDemand, load: int) -> int:
    """Replicas for `load` at the model's target, within [min, max] (one at least while loaded)."""
    if m.target_in_flight is None:
        return max(m.min, len(m.ready) + len(m.starting))
    want = math.ceil(load / m.target_in_flight)
    return min(m.max, max(m.min, want, 1 if load else 0))


def decide(m: ModelDemand, fleet: Fleet, history: History, now: float, *,
           asked: bool = False) -> tuple[Decision | None, str]:
    """At most one action for model `m`, and a line saying why (or why nothing).

    `asked`: a router asked for the model (a request found no ready replica). Updates
    `history.low_since`; the caller records `last_action` when it carries an action out."""
    live = len(m.ready) + len(m.starting)
    load = load_of(m, fleet)
    waiting = fleet.waiting.get(m.name, 0)
    backlog = fleet.backlog.get(m.name, 0)
    if live == 0:
        history.low_since.pop(m.name, None)
        if (asked or waiting or backlog) and m.max > 0:
            why = f"{waiting} request(s) waiting" if waiting else \
                f"{backlog} batch request(s) not sent" if backlog else "a router asked for it"
            return Decision(m.name, "activate", f"no replica running and {why}", current=0, desired=1), why
        return None, "no replica running, none asked for"
    if m.starting:
        return None, f"{len(m.starting)} replica(s) starting"
    current = len(m.ready)
    want = desired_count(m, load)
    slow = m.target_in_flight is not None and saturated(m, fleet)
    if slow and want <= current < m.max:
        want = current + 1  # one more at a time: the queue's length says nothing of how many
    since = history.last_action.get(m.name)
    if want > current:
        history.low_since.pop(m.name, None)
        if since is not None and now - since < m.up_cooldown:
            return None, f"would scale up to {want} ({load} in flight/waiting, target {m.target_in_flight} per " \
                         f"replica) after the up cooldown ({m.up_cooldown:g} s)"
        # All the replicas the load needs at once (capped by max; capacity caps the plan): one
        # at a time, each an apply of minutes, a ramp would reach max a cooldown and an apply
        # per replica late.
        reason = f"{load} in flight/waiting over {current} replica(s), target {m.target_in_flight} per replica"
        if backlog:
            reason += f" ({backlog} of them batch requests not sent yet)"
        if slow and want == current + 1 and desired_count(m, load) <= current:
            reason = (f"requests waited {fleet.queue_wait_s.get(m.name, 0.0):.0f} s in a router's queue "
                      f"(over {SATURATED_WAIT:g} s) on {current} replica(s): they are saturated")
        return Decision(m.name, "scale-up", reason, current=current, desired=want), "scaling up"
    if fleet.unknown:
        history.low_since.pop(m.name, None)
        return None, f"router(s) {', '.join(fleet.unknown)} not known: nothing is scaled down or stopped"
    if m.min == 0 and m.idle_timeout > 0:
        idle = _idle_replicas(m, fleet)
        if len(idle) == current and idle and waiting == 0 and backlog == 0:
            rid = min(idle)
            return Decision(m.name, "stop-idle", f"no request on any router for {m.idle_timeout:g} s",
                            replica=rid, current=current, desired=current - 1), "idle"
    # The last replica of a `min: 0` model goes by its idle_timeout above, never by load.
    if m.target_in_flight is not None and current > max(m.min, 1):
        fits = load <= HYSTERESIS * m.target_in_flight * (current - 1) and not slow
        if not fits:
            history.low_since.pop(m.name, None)
            return None, f"{load} in flight/waiting on {current} replica(s): steady"
        low = history.low_since.setdefault(m.name, now)
        quiet = now - max(low, since if since is not None else low)
        if quiet < m.down_cooldown:
            return None, f"load {load} fits {current - 1} replica(s); scaling down after {m.down_cooldown:g} s " \
                         f"of it ({quiet:.0f} s so far)"
        rid = min(m.ready, key=lambda r: (fleet.in_flight.get(r, 0), r))
        return Decision(m.name, "scale-down", f"{load} in flight/waiting fits {current - 1} replica(s) at target "
                        f"{m.target_in_flight} for {m.down_cooldown:g} s", replica=rid, current=current,
                        desired=current - 1), "scaling down"
    history.low_since.pop(m.name, None)
    return None, f"{current} replica(s), {load} in flight/waiting"


def _idle_replicas(m: ModelDemand, fleet: Fleet) -> list[str]:
    """Ready replicas no router has had a request on for idle_timeout (nor a model request),
    by the definition `llmgw status` shares (llmgw.idle). A router's `idle_s` counts from its
    last request on the replica or, without one, from when it began watching it; a replica
    no router reports is watched by none, so not known to be idle."""
    model_idle = fleet.model_idle_s.get(m.name)
    out = []
    for rid in m.ready:
        quiet = fleet.idle_s.get(rid)
        since_use = quiet if model_idle is None or quiet is None else min(quiet, model_idle)
        if fleet.in_flight.get(rid, 0) == 0 and \
                idle_verdict(since_use, quiet, m.age_s.get(rid), m.idle_timeout) == "idle":
            out.append(rid)
    return out
