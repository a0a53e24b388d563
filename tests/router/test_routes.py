"""Weighted routes, the router's side as a unit: placement by key and conversation, the split it
gives, the guard, and how long the guard's findings last (llmgw/router/routes.py, table.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from llmgw.router.routes import RouteRuntime, placement, prompt_head
from llmgw.router.table import RoutingTable
from llmgw.state import RouteGuardRecord, RouteRecord, RouteTargetRecord, State
from tests.support.router import model, replica

CHAT = "POST /v1/chat/completions"


def record(split: tuple[tuple[str, int], ...] = (("stable", 90), ("canary", 10)),
           guard: RouteGuardRecord | None = None) -> RouteRecord:
    return RouteRecord(targets=[RouteTargetRecord(model=m, weight=w) for m, w in split], guard=guard)


def chat(*turns: str, system: str = "You are terse.") -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "chat", "messages": messages}


def test_a_thousand_keys_split_within_three_points_of_the_weights() -> None:
    route = RouteRuntime("chat", record())
    got = Counter(route.order(f"key-{k}", CHAT, chat(f"question {k} about topic {k % 7}"))[0] for k in range(1000))
    assert sum(got.values()) == 1000
    assert abs(got["canary"] / 10 - 10) <= 3, got
    other = RouteRuntime("chat", record((("a", 50), ("b", 30), ("c", 20))))
    got = Counter(other.order(f"k{k}", CHAT, chat("same prompt for all"))[0] for k in range(1000))
    assert abs(got["a"] / 10 - 50) <= 3 and abs(got["b"] / 10 - 30) <= 3 and abs(got["c"] / 10 - 20) <= 3, got


def test_one_conversation_stays_on_one_target_as_it_grows() -> None:
    route = RouteRuntime("chat", record((("stable", 50), ("canary", 50))))
    for k in range(200):
        turns = [f"conversation {k}: hello"]
        first = route.order(f"key-{k % 13}", CHAT, chat(*turns))[0]
        for n in range(4):  # each turn repeats the head and appends the answer and a new question
            turns += [f"answer {n}", f"follow-up {n}"]
            assert route.order(f"key-{k % 13}", CHAT, chat(*turns))[0] == first


def test_placement_is_stable_and_depends_on_key_and_head() -> None:
    # SHA-256, not Python's seeded hash(): the same in every worker, router and restart.
    other = subprocess.run([sys.executable, "-c", "from llmgw.router.routes import placement; "
                            "print(placement('key-1', 'hello'))"], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert int(other.stdout) == placement("key-1", "hello")
    assert len({placement(f"key-{k}", "hello") for k in range(50)}) > 40
    assert len({placement("key-1", f"hello {k}") for k in range(50)}) > 40
    head = prompt_head(CHAT, chat("hi", "there", "more"))
    assert head == prompt_head(CHAT, chat("hi")) and "there" not in head
    assert prompt_head("POST /v1/completions", {"prompt": ["abc", "def"]}) == "abc"
    assert prompt_head("POST /v1/embeddings", {"input": [[1, 2, 3]]}) == "1,2,3"


def test_the_order_is_the_placed_target_then_the_others_largest_first() -> None:
    route = RouteRuntime("chat", record((("a", 20), ("b", 50), ("c", 30))))
    orders = {tuple(route.order(f"k{k}", CHAT, chat("x"))) for k in range(200)}
    assert orders == {("a", "b", "c"), ("b", "c", "a"), ("c", "b", "a")}


def test_a_zero_weight_gets_nothing_but_stays_a_fallback() -> None:
    route = RouteRuntime("chat", record((("old", 0), ("new", 100))))
    orders = {tuple(route.order(f"k{k}", CHAT, chat(str(k)))) for k in range(300)}
    assert orders == {("new", "old")}


def test_the_guard_trips_a_canary_on_its_error_rate_and_moves_its_share() -> None:
    guard = RouteGuardRecord(max_error_ppm=100_000, window=60, min_requests=10)  # 10 %
    route = RouteRuntime("chat", record(guard=guard))
    for i in range(9):  # below min_requests: nothing is decided, however bad
        assert route.attempted("canary", True, now=100 + i) is None
    assert route.attempted("stable", True, now=109) is None  # the stable target is never judged
    assert not route.stats["stable"].attempts  # nor kept
    trip = route.attempted("canary", True, now=110)
    assert trip is not None and trip.target == "canary"
    assert trip.reason == ("canary broke the guard of route chat: 100.0% of its last 10 requests failed in 60 s "
                           "(max_error_rate 10%); its share goes to stable until the route changes")
    assert route.shares() == [("stable", 100), ("canary", 0)]
    assert {route.order(f"k{k}", CHAT, chat(str(k)))[0] for k in range(300)} == {"stable"}
    assert route.order("k", CHAT, chat("x")) == ["stable", "canary"]  # still the last resort
    report = route.report()
    assert report["targets"][1] == {"model": "canary", "weight": 10, "share": 0, "tripped": True,
                                    "reason": trip.reason,
                                    "tripped_at": datetime.fromtimestamp(trip.at, UTC).isoformat(timespec="seconds")}
    assert route.attempted("canary", True, now=111) is None  # tripped once
    assert route.trips == 1 and len(route.stats["canary"].attempts) == 10  # and no longer counted
    unguarded = RouteRuntime("chat", record())
    unguarded.attempted("canary", True, now=1.0)
    assert not unguarded.stats["canary"].attempts and not unguarded.tripped  # no guard: nothing kept


def test_the_error_rate_is_over_the_window_only() -> None:
    guard = RouteGuardRecord(max_error_ppm=200_000, window=10, min_requests=5)  # 20 %
    route = RouteRuntime("chat", record(guard=guard))
    for i in range(5):
        route.attempted("canary", True, now=float(i))  # 5 failures: trips at the fifth
    assert route.tripped
    fresh = RouteRuntime("chat", record(guard=guard))
    for i in range(4):
        fresh.attempted("canary", True, now=float(i))
    for i in range(20):  # the failures leave the window; twenty successes inside it
        assert fresh.attempted("canary", False, now=20.0 + i) is None
    assert fresh.attempted("canary", True, now=40.0) is None  # 1 of 11 in the window: 9 %
    assert not fresh.tripped


def test_the_guard_trips_on_the_ttft_p90() -> None:
    guard = RouteGuardRecord(max_ttft_p90_ms=500, window=60, min_requests=10)
    route = RouteRuntime("chat", record(guard=guard))
    for i in range(8):
        assert route.first_token("canary", 0.1, now=float(i)) is None
    route.first_token("canary", 0.9, now=8.0)
    assert route.first_token("canary", 0.9, now=9.0) is not None  # 2 of 10 slow: the p90 is 0.9 s
    assert "time to first token p90 was 0.9 s over 10 streams in 60 s (max_ttft_p90 0.5 s)" in \
        route.tripped["canary"].reason
    calm = RouteRuntime("chat", record(guard=guard))
    for i in range(9):
        calm.first_token("canary", 0.1, now=float(i))
    assert calm.first_token("canary", 0.9, now=9.0) is None  # 1 of 10 slow: the p90 is 0.1 s


def state(split: tuple[tuple[str, int], ...], canary_rid: str = "canary-1", serial: int = 1) -> State:
    guard = RouteGuardRecord(max_error_ppm=100_000, window=60, min_requests=1)
    chat_record = model("chat", min=0, fallbacks=("spare",)).model_copy(
        update={"route": record(split, guard), "scaling": model("chat", min=0).scaling.model_copy(
            update={"max": 0})})
    return State(lineage="l", serial=serial, models=[model("stable"), model("canary"), model("spare"), chat_record],
                 replicas=[replica("stable-1", "stable", "http://127.0.0.1:9001"),
                           replica(canary_rid, "canary", "http://127.0.0.1:9002"),
                           replica("spare-1", "spare", "http://127.0.0.1:9003")])


def test_the_table_chains_a_route_through_its_targets_then_its_fallbacks() -> None:
    table = RoutingTable(state((("stable", 90), ("canary", 10))))
    entry = table.resolve("chat")
    assert entry is not None and entry.route is not None and not entry.on_demand
    assert [e.name for e in table.chain(entry)] == ["stable", "canary", "spare"]
    assert [e.name for e in table.route_chain(entry, ["canary", "stable"])] == ["canary", "stable", "spare"]


def test_guard_findings_last_until_the_route_or_its_canary_changes() -> None:
    split = (("stable", 90), ("canary", 10))
    table = RoutingTable(state(split))
    entry = table.resolve("chat")
    assert entry is not None and entry.route is not None
    entry.route.attempted("canary", True)
    assert entry.route.tripped
    again = RoutingTable(state(split, serial=2), table.replicas, routes=table.routes)  # an unrelated write
    kept = again.resolve("chat")
    assert kept is not None and kept.route is entry.route
    shifted = RoutingTable(state((("stable", 80), ("canary", 20)), serial=3), again.replicas, routes=again.routes)
    fresh = shifted.resolve("chat")
    assert fresh is not None and fresh.route is not None and not fresh.route.tripped
    fresh.route.attempted("canary", True)
    replaced = RoutingTable(state((("stable", 80), ("canary", 20)), canary_rid="canary-2", serial=4),
                            shifted.replicas, routes=shifted.routes)  # a new canary build
    new = replaced.resolve("chat")
    assert new is not None and new.route is not None and not new.route.tripped
