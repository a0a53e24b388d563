"""Routing table: names and aliases, least outstanding, drains, failure backoff, quotas, addresses."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from llmgw.errors import UsageError
from llmgw.router.quotas import refusal_error
from llmgw.router.server import parse_addr
from llmgw.router.table import RoutingTable
from llmgw.state import State
from llmgw.store import GroupLimit, Refusal, Store, UsageDelta, open_store
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


def _quota_store(tmp_path: Path, **limits: int | None) -> tuple[Store, str, list[GroupLimit]]:
    store = open_store(f"sqlite://{tmp_path / 'store.sqlite'}")
    store.set_group("g", **limits)  # type: ignore[arg-type]
    key = store.create_key("k", "g")[0].id
    return store, key, [GroupLimit("g", limits.get("rpm"), limits.get("tokens_per_day"))]


def test_rpm_sliding_window(tmp_path: Path) -> None:
    store, key, limits = _quota_store(tmp_path, rpm=2)
    t0 = 600.0 * 60  # the start of a minute

    def admit(at: float, rid: str) -> Refusal | None:
        return store.admit(key, limits, now=at, day="d", reserve=0, reservation_id=rid, expires_at=at + 60)

    assert admit(t0, "a") is None and admit(t0, "b") is None
    refused = admit(t0 + 1, "c")
    assert refused is not None and refused.what == "rpm"
    error = refusal_error(refused, t0 + 1)
    assert error.status == 429 and "Retry-After" in error.headers
    # Next minute, a quarter in: the previous minute still weighs 3/4 of 2 = 1.5 -> refused.
    assert admit(t0 + 75, "d") is not None
    # Three quarters in: 0.5 + 1 <= 2 -> allowed.
    assert admit(t0 + 105, "e") is None
    store.close()


def test_tokens_per_day_reserve_then_settle(tmp_path: Path) -> None:
    store, key, limits = _quota_store(tmp_path, tokens_per_day=100)

    def admit(reserve: int, rid: str) -> Refusal | None:
        return store.admit(key, limits, now=1000.0, day="2026-01-01", reserve=reserve, reservation_id=rid,
                           expires_at=5000.0)

    assert admit(60, "r1") is None
    assert admit(50, "r2") is None  # 60 reserved < 100: admitted, may take the group past it
    refused = admit(1, "r3")  # 110 reserved
    assert refused is not None and refused.what == "tokens" and refusal_error(refused, 0).status == 429
    # r1 used 10 tokens: settled, its reservation becomes usage in one transaction.
    store.add_usage([UsageDelta(key, "2026-01-01", "m", 1, 4, 6)], [], ["r1"], now=1000.0)
    assert admit(1, "r4") is None  # 10 used + 50 reserved
    assert store.admit(key, limits, now=6000.0, day="2026-01-02", reserve=1, reservation_id="r5",
                       expires_at=9000.0) is None  # a new day, and r2/r4 expired
    store.close()


@pytest.mark.parametrize(("text", "addr"), [
    ("127.0.0.1:8001", ("127.0.0.1", 8001)), (":9", ("0.0.0.0", 9)), ("8000", ("0.0.0.0", 8000)),
    ("[::1]:8080", ("::1", 8080)), ("host.example:1", ("host.example", 1))])
def test_parse_addr(text: str, addr: tuple[str, int]) -> None:
    assert parse_addr(text, default_host="0.0.0.0") == addr


@pytest.mark.parametrize("text", ["host:", "x:y", "1:99999"])
def test_parse_addr_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        parse_addr(text, default_host="0.0.0.0")
