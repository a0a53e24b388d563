"""Routers' load reports, as the controller receives them: parsed as hostile input, kept per router.

Every few seconds each router process POSTs its load (router/ondemand.py `report`): per
replica, requests in flight, seconds since its last request and whether its health checks
fail; per model, the requests it holds waiting, how long the longest of them has waited
(`queue_wait_s`), seconds since its last request, and its batches' requests not sent yet
(`backlog`). `parse_report` checks every field (a router's credential names it, never the
body) and `Reports` keeps the newest of each (router, process), bounded per router.
llmgw.controller.demand decides from them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmgw.errors import LlmgwError

# A report older than this (seconds) does not count: its router is not known.
STALE_AFTER = 15.0
# What one router may hold in the controller's memory (Reports): processes (its workers,
# and restarted ones until they expire) and bytes of their report bodies together.
MAX_PROCESSES_PER_ROUTER = 64
MAX_BYTES_PER_ROUTER = 8 * 1024 * 1024

class ReportError(LlmgwError):
    pass


class ForgedReport(ReportError):
    """A report in the name of a router other than its credential's."""


@dataclass(frozen=True)
class ReplicaLoad:
    in_flight: int = 0
    # Seconds since this router last started or finished a request on the replica (or first
    # saw it, when never used).
    idle_s: float = 0.0
    # The router's health checks find it failing now (ejected or checked down); False when the
    # router did not say (a router from before the field existed).
    failing: bool = False


@dataclass(frozen=True)
class Report:
    """One router process's view, as received (`at`: the controller's monotonic clock)."""

    router: str
    process: str
    at: float
    serial: int = 0
    replicas: Mapping[str, ReplicaLoad] = field(default_factory=dict)
    waiting: Mapping[str, int] = field(default_factory=dict)  # model -> requests held for a replica
    model_idle_s: Mapping[str, float] = field(default_factory=dict)  # model -> seconds since its last request
    # model -> seconds the longest request waiting in the router's queue has waited
    queue_wait_s: Mapping[str, float] = field(default_factory=dict)
    # model -> requests of the batches the router runs not sent yet (it sends a few at a time)
    backlog: Mapping[str, int] = field(default_factory=dict)


def _count(value: object, what: str, *, maximum: float = 10**9) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= maximum \
            or math.isnan(value):
        raise ReportError(f"{what} must be a number from 0 to {maximum:g}, not {value!r}")
    return float(value)


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 200 or not value.isprintable():
        raise ReportError(f"{what} must be a name of 1 to 200 printable characters")
    return value


def parse_report(data: Any, at: float, router: str) -> Report:
    """A report from a router's JSON (hostile until checked), counted under `router`: the
    name its credential carries, never the body's (a body naming another router is refused)."""
    if not isinstance(data, dict):
        raise ReportError("a report is a JSON object")
    claimed = data.get("router", router)
    if claimed != router:
        raise ForgedReport(f"this credential is router {router!r}'s; a report for {str(claimed)[:200]!r} needs "
                           "that router's own", hint="each router reports with its own token only")
    replicas: dict[str, ReplicaLoad] = {}
    raw_replicas = data.get("replicas", {})
    if not isinstance(raw_replicas, dict) or len(raw_replicas) > 100_000:
        raise ReportError("replicas must be an object of replica id -> {in_flight, idle_s}")
    for rid, load in raw_replicas.items():
        if not isinstance(load, dict):
            raise ReportError(f"replicas.{_name(rid, 'a replica id')} must be an object")
        healthy = load.get("healthy", True)
        if not isinstance(healthy, bool):
            raise ReportError(f"replicas.{rid}.healthy must be true or false, not {str(healthy)[:40]!r}")
        replicas[_name(rid, "a replica id")] = ReplicaLoad(
            in_flight=int(_count(load.get("in_flight", 0), f"replicas.{rid}.in_flight")),
            idle_s=_count(load.get("idle_s", 0), f"replicas.{rid}.idle_s"), failing=not healthy)
    counts: dict[str, dict[str, int]] = {"waiting": {}, "backlog": {}}
    seconds: dict[str, dict[str, float]] = {"model_idle_s": {}, "queue_wait_s": {}}
    for key in (*counts, *seconds):
        raw = data.get(key, {})  # absent: a router from before the field existed
        if not isinstance(raw, dict) or len(raw) > 100_000:
            raise ReportError(f"{key} must be an object of model -> number")
        for model, n in raw.items():
            model = _name(model, "a model name")
            if key in counts:
                if isinstance(n, float) and not n.is_integer():  # a count is whole: 2.5 requests is not one
                    raise ReportError(f"{key}.{model} must be a whole number of requests, not {n!r}")
                counts[key][model] = int(_count(n, f"{key}.{model}"))
            else:
                seconds[key][model] = _count(n, f"{key}.{model}")
    return Report(router=router, process=_name(str(data.get("process", "-")), "process"),
                  at=at, serial=int(_count(data.get("serial", 0), "serial", maximum=2**62)), replicas=replicas,
                  waiting=counts["waiting"], model_idle_s=seconds["model_idle_s"],
                  queue_wait_s=seconds["queue_wait_s"], backlog=counts["backlog"])


class Reports:
    """The newest report of every router process (thread-safe: the API writes, the loop reads).

    Bounded per router, whatever a router sends: at most `per_router` processes and
    `per_router_bytes` of report bodies (a new process past either evicts that router's
    oldest), and a process silent for four staleness periods is dropped. So one router,
    even compromised, holds a bounded share and cannot evict another router's reports."""

    def __init__(self, stale_after: float = STALE_AFTER, *, per_router: int = MAX_PROCESSES_PER_ROUTER,
                 per_router_bytes: int = MAX_BYTES_PER_ROUTER) -> None:
        self.stale_after = stale_after
        self.per_router = per_router
        self.per_router_bytes = per_router_bytes
        self._lock = threading.Lock()
        self._by: dict[str, dict[str, tuple[Report, int]]] = {}  # router -> process -> (report, its size)

    def add(self, report: Report, size: int = 0) -> None:
        """Keep `report` (its body `size` bytes) as its process's newest."""
        with self._lock:
            mine = self._by.setdefault(report.router, {})
            self._expire(mine, report.at)
            mine.pop(report.process, None)
            while mine and (len(mine) >= self.per_router
                            or sum(n for _r, n in mine.values()) + size > self.per_router_bytes):
                del mine[min(mine, key=lambda p: mine[p][0].at)]  # this router's oldest process
            mine[report.process] = (report, size)

    def _expire(self, mine: dict[str, tuple[Report, int]], now: float) -> None:
        for process in [p for p, (r, _n) in mine.items() if now - r.at > 4 * self.stale_after]:
            del mine[process]  # a process gone for good (restarted router, old worker)

    def fresh(self, now: float) -> list[Report]:
        with self._lock:
            for router in list(self._by):
                self._expire(self._by[router], now)
                if not self._by[router]:
                    del self._by[router]
            return [r for mine in self._by.values() for r, _n in mine.values() if now - r.at <= self.stale_after]

    def held(self) -> dict[str, tuple[int, int]]:
        """router -> (processes, bytes) kept: what the bounds above bound."""
        with self._lock:
            return {router: (len(mine), sum(n for _r, n in mine.values())) for router, mine in self._by.items()}
