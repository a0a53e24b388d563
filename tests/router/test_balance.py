"""Prefix-affinity routing (llmgw/router/balance.py): the ring, the load bound, the prefix key,
and the policy as the routing table applies it (drained and ejected replicas skipped)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import get_args

import pytest

from llmgw.catalog.schema import Routing as CatalogRouting
from llmgw.router.balance import (
    LOAD_FACTOR,
    PREFIX_CHARS,
    SHARED_SYSTEM_CHARS,
    SLACK,
    Ring,
    bound,
    pick_by_prefix,
    prefix_key,
)
from llmgw.router.table import RoutingTable
from llmgw.state import Routing, State
from tests.support.router import REPO, model, replica

CHAT = "POST /v1/chat/completions"


@dataclass
class Rep:
    id: str
    in_flight: int = 0


def keys(n: int) -> list[int]:
    return [k for i in range(n) if (k := prefix_key("POST /v1/completions", {"prompt": f"prompt {i}"})) is not None]


def test_catalog_and_state_name_the_same_policies() -> None:
    assert get_args(CatalogRouting) == get_args(Routing) == ("least-load", "prefix-affinity")


def test_keys_spread_evenly_over_the_ring() -> None:
    ring = Ring(["a", "b", "c"])
    counts = Counter(ring.order(k)[0] for k in keys(3000))
    assert set(counts) == {"a", "b", "c"}
    assert all(700 <= c <= 1300 for c in counts.values()), counts  # 1000 each, give or take the vnodes


def test_adding_or_removing_a_replica_moves_only_its_share() -> None:
    ks = keys(2000)
    three = Ring(["a", "b", "c"])
    four = Ring(["a", "b", "c", "d"])
    before = {k: three.order(k)[0] for k in ks}
    after = {k: four.order(k)[0] for k in ks}
    moved = [k for k in ks if before[k] != after[k]]
    assert all(after[k] == "d" for k in moved)  # keys only move to the new replica
    assert 0.15 * len(ks) <= len(moved) <= 0.35 * len(ks)  # about a quarter, not a reshuffle
    two = Ring(["a", "c"])
    assert all(two.order(k)[0] == before[k] for k in ks if before[k] != "b")  # removing b moves only b's keys


def test_the_ring_is_the_same_in_every_process() -> None:
    # blake2b, not hash(): two routers (or two worker processes) agree on every key's replica.
    code = ("from llmgw.router.balance import Ring, prefix_key\n"
            "k = prefix_key('POST /v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}]})\n"
            "print(k, Ring(['a', 'b', 'c']).order(k))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    k = prefix_key(CHAT, {"messages": [{"role": "user", "content": "hi"}]})
    assert runs == {f"{k} {Ring(['a', 'b', 'c']).order(k)}\n"}  # type: ignore[arg-type]
    assert Ring(["a", "b", "c"]).order(12345) == Ring(["c", "b", "a"]).order(12345)


def test_the_bound_moves_load_off_a_hot_replica() -> None:
    reps = [Rep("a"), Rep("b"), Rep("c")]
    ring = Ring([r.id for r in reps])
    key = keys(1)[0]
    placed: Counter[str] = Counter()
    for _ in range(30):  # one prefix, 30 requests that all stay in flight
        r = pick_by_prefix(ring, key, reps)
        assert r is not None
        r.in_flight += 1
        placed[r.id] += 1
        total = sum(x.in_flight for x in reps)
        assert max(x.in_flight for x in reps) <= bound(total - 1, len(reps))  # never over the bound
    order = ring.order(key)
    # The home takes its bound (ceil(1.25 * 30 / 3) + 1 = 14), the rest spills clockwise.
    assert placed[order[0]] == 14 and placed[order[1]] == 14 and placed[order[2]] == 2
    assert bound(29, 3) == 14 and LOAD_FACTOR == 1.25 and SLACK == 1
    # At low load a replica may hold one request more than its share: two at once of one
    # prefix stay home (1.25x the average alone would be 1 and split them).
    assert bound(0, 3) == 2 and bound(1, 3) == 2 and bound(2, 3) == 3


def test_requests_stay_home_while_load_is_even() -> None:
    reps = [Rep("a", 2), Rep("b", 2), Rep("c", 2)]
    ring = Ring([r.id for r in reps])
    for k in keys(50):
        r = pick_by_prefix(ring, k, reps)
        assert r is not None and r.id == ring.order(k)[0]


def test_fallback_to_least_loaded_when_all_are_over() -> None:
    ring = Ring(["a", "b"])
    key = keys(1)[0]
    reps = [Rep("a", 5), Rep("b", 3)]
    assert pick_by_prefix(ring, key, reps, factor=0.1) is reps[1]  # nothing within the bound
    assert pick_by_prefix(ring, key, []) is None


def test_chat_key_is_the_system_prompt_and_first_turn() -> None:
    system = {"role": "system", "content": "You are a pirate. " * 10}
    first = [system, {"role": "user", "content": "ahoy"}]
    later = [*first, {"role": "assistant", "content": "arr"}, {"role": "user", "content": "more"}]
    other = [system, {"role": "user", "content": "hello"}]
    assert prefix_key(CHAT, {"messages": first}) == prefix_key(CHAT, {"messages": later})  # one conversation
    assert prefix_key(CHAT, {"messages": first}) != prefix_key(CHAT, {"messages": other})
    long_system = {"role": "system", "content": "x" * PREFIX_CHARS}
    assert (prefix_key(CHAT, {"messages": [long_system, {"role": "user", "content": "a"}]})
            == prefix_key(CHAT, {"messages": [long_system, {"role": "user", "content": "b"}]}))  # shared head
    parts = {"role": "user", "content": [{"type": "text", "text": "ahoy"}, {"type": "image_url", "image_url": {}}]}
    assert prefix_key(CHAT, {"messages": [system, parts]}) is not None
    assert prefix_key(CHAT, {"messages": "not a list"}) is not None  # hostile shapes: a key or None, no error
    assert prefix_key(CHAT, {"messages": [1, None, {"role": 3}]}) is None
    assert prefix_key(CHAT, {}) is None


def test_a_long_system_prompt_alone_is_the_key() -> None:
    """Conversations over one long system prompt share a replica whatever their first turns,
    even when the prompt leaves room in PREFIX_CHARS for them (bench/prefix's ~1,800
    characters did: each conversation had a key of its own)."""
    system = {"role": "system", "content": "You are assistant 1. " + "the of and " * 160}
    assert SHARED_SYSTEM_CHARS <= len(system["content"]) < PREFIX_CHARS - 100
    keys = {prefix_key(CHAT, {"messages": [system, {"role": "user", "content": f"session {i}: hi"}]})
            for i in range(5)}
    assert len(keys) == 1
    dev = {"role": "developer", "content": system["content"]}
    assert prefix_key(CHAT, {"messages": [dev, {"role": "user", "content": "a"}]}) == \
        prefix_key(CHAT, {"messages": [dev, {"role": "user", "content": "b"}]})
    other = {"role": "system", "content": "You are assistant 2. " + "the of and " * 160}
    assert prefix_key(CHAT, {"messages": [other, {"role": "user", "content": "session 0: hi"}]}) not in keys
    resp = "POST /v1/responses"
    assert prefix_key(resp, {"instructions": system["content"], "input": "q1"}) == \
        prefix_key(resp, {"instructions": system["content"], "input": "q2"})


def test_completion_and_responses_keys() -> None:
    comp = "POST /v1/completions"
    head = "y" * PREFIX_CHARS
    assert prefix_key(comp, {"prompt": head + "a"}) == prefix_key(comp, {"prompt": head + "b"})
    assert prefix_key(comp, {"prompt": "a"}) != prefix_key(comp, {"prompt": "b"})
    assert prefix_key(comp, {"prompt": ["a", "zzz"]}) == prefix_key(comp, {"prompt": "a"})
    assert prefix_key(comp, {"prompt": [1, 2, 3]}) == prefix_key(comp, {"prompt": [[1, 2, 3]]})
    resp = "POST /v1/responses"
    assert (prefix_key(resp, {"instructions": "be terse", "input": "q1"})
            != prefix_key(resp, {"instructions": "be verbose", "input": "q1"}))
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q1"}]}]
    assert prefix_key(resp, {"instructions": "i", "input": items}) is not None
    assert prefix_key("POST /v1/embeddings", {"input": "x"}) is None


def test_a_long_prompt_is_read_only_up_to_the_bound() -> None:
    big = "z" * 5_000_000
    t0 = time.perf_counter()
    k = prefix_key(CHAT, {"messages": [{"role": "system", "content": big}, {"role": "user", "content": big}]})
    assert k is not None and time.perf_counter() - t0 < 0.05  # a slice of the head, not the whole 10 MB


def affinity_table(*states: str) -> RoutingTable:
    reps = [replica(f"r{i}", "m", f"http://127.0.0.1:{9000 + i}", s) for i, s in enumerate(states)]
    rec = model("m").model_copy(update={"routing": "prefix-affinity"})
    return RoutingTable(State(models=[rec, model("plain")], replicas=reps))


def test_table_pick_follows_the_policy_and_skips_drained_and_ejected() -> None:
    t = affinity_table("ready", "ready", "ready")
    entry = t.models["m"]
    now = time.monotonic()
    assert entry.by_prefix and not t.models["plain"].by_prefix
    ks = keys(60)
    homes = {k: entry.pick(set(), now, prefix=k) for k in ks}
    assert len({r.id for r in homes.values() if r}) == 3  # keys spread over the replicas
    assert all(entry.pick(set(), now, prefix=k) is homes[k] for k in ks)  # and stay put
    victim = homes[ks[0]]
    assert victim is not None
    victim.mark_failure("refused", base=10.0, cap=10.0, now=now)  # ejected
    moved = entry.pick(set(), now, prefix=ks[0])
    assert moved is not None and moved is not victim
    assert entry.pick(set(), now, prefix=ks[0], panic=True) is victim  # panic tries ejected ones
    assert entry.pick({victim.id}, now, prefix=ks[0], panic=True) is moved  # tried: the next on the ring

    t2 = affinity_table("ready", "draining", "ready")
    e2 = t2.models["m"]
    assert all((r := e2.pick(set(), now, prefix=k)) is not None and r.id != "r1" for k in ks)
    assert e2.pick({"r0", "r2"}, now, prefix=ks[0]) is None


def test_without_a_prefix_key_the_model_is_least_load() -> None:
    t = affinity_table("ready", "ready")
    t.replicas["r0"].in_flight = 4
    assert t.models["m"].pick(set(), time.monotonic()) is t.replicas["r1"]


@pytest.mark.parametrize("routing", ["least-load", "prefix-affinity"])
def test_state_round_trip_keeps_routing(routing: str) -> None:
    rec = model("m").model_copy(update={"routing": routing})
    state = State(models=[rec])
    assert State.model_validate_json(state.to_json()).models[0].routing == routing
