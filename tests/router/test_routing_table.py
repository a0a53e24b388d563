"""Routing table: names and aliases, least outstanding, drains, failure backoff, quotas, addresses."""

from __future__ import annotations

import time

import pytest

from llmgw.errors import UsageError
from llmgw.router.quotas import GroupQuota
from llmgw.router.server import parse_addr
from llmgw.router.table import RoutingTable
from llmgw.state import State
from tests.support.router import model, replica


def table(*states: str) -> RoutingTable:
    reps = [replica(f"r{i}", "m", f"http://127.0.0.1:{9000 + i}", s) for i, s in enumerate(states)]
    return RoutingTable(State(models=[model("m", aliases=("alias",), fallbacks=("n", "gone")), model("n")],
                              replicas=reps))


def test_names_aliases_and_fallback_chain() -> None:
    t = table("ready")
    assert t.resolve("m") is t.resolve("alias") is t.models["m"]
    assert t.resolve("M") is None
    assert [e.name for e in t.chain(t.models["m"])] == ["m", "n"]  # unknown fallbacks skipped


def test_least_outstanding_and_only_ready() -> None:
    t = table("ready", "ready", "starting", "draining")
    entry = t.models["m"]
    now = time.monotonic()
    t.replicas["r0"].in_flight = 3
    t.replicas["r1"].in_flight = 1
    assert entry.pick(set(), now).id == "r1"  # type: ignore[union-attr]
    assert entry.pick({"r1"}, now).id == "r0"  # type: ignore[union-attr]
    assert entry.pick({"r0", "r1"}, now) is None  # starting and draining get nothing


def test_ties_rotate() -> None:
    t = table("ready", "ready", "ready")
    entry = t.models["m"]
    picks = {entry.pick(set(), time.monotonic()).id for _ in range(6)}  # type: ignore[union-attr]
    assert picks == {"r0", "r1", "r2"}


def test_failure_backoff_then_half_open_then_healthy() -> None:
    t = table("ready")
    r = t.replicas["r0"]
    now = time.monotonic()
    r.mark_failure("refused", base=1.0, cap=4.0, now=now)
    assert not r.routable(now) and r.routable(now + 1.0)
    r.mark_failure("refused", base=1.0, cap=4.0, now=now)
    assert not r.routable(now + 1.5) and r.routable(now + 2.0)  # doubled
    for _ in range(10):
        r.mark_failure("refused", base=1.0, cap=4.0, now=now)
    assert r.routable(now + 4.0)  # capped
    r.mark_healthy()
    assert r.routable(now) and r.failures == 0


def test_reload_keeps_runtime_and_drain_takes_effect() -> None:
    t1 = table("ready", "ready")
    t1.replicas["r0"].in_flight = 2
    t2 = RoutingTable(State(models=[model("m")], replicas=[
        replica("r0", "m", "http://127.0.0.1:9000", "draining"), replica("r1", "m", "http://127.0.0.1:9001")]),
        t1.replicas)
    assert t2.replicas["r0"] is t1.replicas["r0"] and t2.replicas["r0"].in_flight == 2
    assert t2.models["m"].pick(set(), time.monotonic()).id == "r1"  # type: ignore[union-attr]


def test_new_endpoint_forgets_health() -> None:
    t1 = table("ready")
    t1.replicas["r0"].mark_failure("down", base=10, cap=10)
    t2 = RoutingTable(State(models=[model("m")], replicas=[replica("r0", "m", "http://127.0.0.1:9999")]),
                      t1.replicas)
    assert t2.replicas["r0"].health == "unknown" and t2.replicas["r0"].routable(time.monotonic())


def test_rpm_sliding_window() -> None:
    q = GroupQuota("g", rpm=2, tokens_per_day=None)
    t0 = 600.0 * 60  # the start of a minute
    assert q.refusal(t0, "d") is None
    q.add_request(int(t0 // 60))
    q.add_request(int(t0 // 60))
    refused = q.refusal(t0 + 1, "d")
    assert refused is not None and refused.status == 429 and "Retry-After" in refused.headers
    # Next minute, a quarter in: the previous minute still weighs 3/4 of 2 = 1.5 -> refused.
    assert q.refusal(t0 + 75, "d") is not None
    # Three quarters in: 0.5 + 1 <= 2 -> allowed.
    assert q.refusal(t0 + 105, "d") is None


def test_tokens_per_day_and_flush_layers() -> None:
    q = GroupQuota("g", rpm=None, tokens_per_day=100)
    q.add_tokens("2026-01-01", 60)
    assert q.refusal(0, "2026-01-01") is None
    q.begin_flush()
    q.add_tokens("2026-01-01", 50)
    assert q.tokens_on("2026-01-01") == 110  # flushing + pending both count
    assert q.refusal(0, "2026-01-01") is not None
    q.end_flush({}, "2026-01-01", 60, 0)  # the store now holds the flushed 60
    assert q.tokens_on("2026-01-01") == 110
    assert q.tokens_on("2026-01-02") == 0  # a new day starts from zero
    q.begin_flush()
    q.abort_flush()  # a failed write puts the counts back
    assert q.tokens_on("2026-01-01") == 110


@pytest.mark.parametrize(("text", "addr"), [
    ("127.0.0.1:8001", ("127.0.0.1", 8001)), (":9", ("0.0.0.0", 9)), ("8000", ("0.0.0.0", 8000)),
    ("[::1]:8080", ("::1", 8080)), ("host.example:1", ("host.example", 1))])
def test_parse_addr(text: str, addr: tuple[str, int]) -> None:
    assert parse_addr(text, default_host="0.0.0.0") == addr


@pytest.mark.parametrize("text", ["host:", "x:y", "1:99999"])
def test_parse_addr_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        parse_addr(text, default_host="0.0.0.0")
