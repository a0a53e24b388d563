"""Adapters loaded at run time (router/lora.py): the bookkeeping of which replica holds which
adapter (affinity, room, least recently used, never one in flight), and the loader's single
flight and failures, against a recording stand-in for the engine's load API (the real vLLM
is tests/router/test_adapters_vllm.py's)."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.router.lora import LoraBook, RuntimeLoras
from llmgw.router.openai_errors import RouterError
from llmgw.router.table import ModelEntry, ReplicaRuntime, RoutingTable
from llmgw.state import AdapterRecord, LoadedAdapter, Replica, Shard, State
from tests.support.router import model

ADAPTERS = ("a", "b", "c")


def _replica(rid: str, port: int) -> Replica:
    return Replica(id=rid, model="base", profile="p", engine="vllm", state="ready",
                   endpoint=f"http://127.0.0.1:{port}",
                   adapters=[LoadedAdapter(name=a, path=f"/var/cache/llmgw/{a}") for a in ADAPTERS],
                   shards=[Shard(node="localhost", rank=0, port=port, unit=f"llmgw-{rid}-0.service")])


def _table(max_loras: int = 1, replicas: int = 2) -> RoutingTable:
    base = model("base").model_copy(update={"adapters": [AdapterRecord(name=a) for a in ADAPTERS],
                                            "max_loras": max_loras})
    return RoutingTable(State(lineage="l", models=[base],
                              replicas=[_replica(f"base-{i}", 20000 + i) for i in range(1, replicas + 1)]))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _never(_: ReplicaRuntime) -> bool:
    return False


def test_an_adapter_stays_on_the_replica_that_holds_it() -> None:
    table = _table(max_loras=2)
    r1, r2 = table.replicas["base-1"], table.replicas["base-2"]
    book = LoraBook(Clock())
    first = book.choose([r1, r2], "a", 2, _never)
    assert first is not None and first.load and first.evict is None
    first.replica.in_flight += 5  # busier than the other replica, but the only one holding `a`
    again = book.choose([r1, r2], "a", 2, _never)
    assert again is not None and again.replica is first.replica and not again.load
    assert again.held is first.held and first.held.in_flight == 2


def test_a_new_adapter_goes_to_the_least_loaded_replica_with_room() -> None:
    table = _table(max_loras=1)
    r1, r2 = table.replicas["base-1"], table.replicas["base-2"]
    book = LoraBook(Clock())
    r1.in_flight = 3
    a = book.choose([r1, r2], "a", 1, _never)
    assert a is not None and a.replica is r2 and a.load
    # `b`: r2 is full and its only adapter is in flight; r1 has room though busier.
    b = book.choose([r1, r2], "b", 1, _never)
    assert b is not None and b.replica is r1 and b.load and b.evict is None


def test_past_max_loras_the_least_recently_used_idle_adapter_is_unloaded() -> None:
    table = _table(max_loras=2, replicas=1)
    r = table.replicas["base-1"]
    book = LoraBook(Clock())
    for name in ("a", "b"):
        c = book.choose([r], name, 2, _never)
        assert c is not None
        book.release(c.held)
    used = book.choose([r], "a", 2, _never)  # `a` used again: `b` is now the least recently used
    assert used is not None
    book.release(used.held)
    c = book.choose([r], "c", 2, _never)
    assert c is not None and c.load and c.evict == "b"
    assert set(book.loaded(r)) == {"a", "c"}


def test_an_adapter_with_requests_in_flight_is_never_unloaded() -> None:
    table = _table(max_loras=1, replicas=1)
    r = table.replicas["base-1"]
    book = LoraBook(Clock())
    a = book.choose([r], "a", 1, _never)
    assert a is not None
    assert book.choose([r], "b", 1, _never) is None  # `a` is in flight: no room anywhere
    book.release(a.held)
    b = book.choose([r], "b", 1, _never)
    assert b is not None and b.evict == "a" and book.loaded(r) == ["b"]


def test_saturated_holders_spill_to_a_replica_with_room() -> None:
    table = _table(max_loras=1)
    r1, r2 = table.replicas["base-1"], table.replicas["base-2"]
    book = LoraBook(Clock())
    first = book.choose([r1, r2], "a", 1, _never)
    assert first is not None
    holder = first.replica
    other = r2 if holder is r1 else r1
    spill = book.choose([r1, r2], "a", 1, lambda r: r is holder)
    assert spill is not None and spill.replica is other and spill.load
    # Both hold it and both are saturated: the least loaded of them, nothing more loaded.
    holder.in_flight, other.in_flight = 4, 2
    full = book.choose([r1, r2], "a", 1, lambda r: True)
    assert full is not None and full.replica is other and not full.load


def test_a_restarted_engine_holds_nothing() -> None:
    table = _table(max_loras=1, replicas=1)
    r = table.replicas["base-1"]
    book = LoraBook(Clock())
    assert book.choose([r], "a", 1, _never) is not None
    r.endpoint = "http://127.0.0.1:29999"  # a new address is a new process (table.py)
    assert book.loaded(r) == []


class Engine:
    """Records load and unload calls; each load waits for `gate` (so requests overlap it)."""

    def __init__(self, status: int = 200, text: str = "Success") -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.gate = asyncio.Event()
        self.status, self.text = status, text

    async def post(self, replica: ReplicaRuntime, path: str, body: dict[str, str]) -> tuple[int, str]:
        self.calls.append((replica.id, path, body))
        if path.endswith("/load_lora_adapter"):
            await self.gate.wait()
        return self.status, self.text


def _entry(table: RoutingTable, name: str) -> ModelEntry:
    entry = table.resolve(name)
    assert entry is not None and entry.adapter is not None
    return entry


def test_concurrent_first_requests_load_once_with_the_states_path() -> None:
    async def scenario() -> None:
        table = _table(max_loras=1, replicas=1)
        engine = Engine()
        events: list[tuple[str, str]] = []
        loras = RuntimeLoras(engine.post, lambda a, e: events.append((a, e)))
        a = _entry(table, "a")
        waiting = [asyncio.create_task(loras.acquire(a, list(a.replicas), _never)) for _ in range(5)]
        await asyncio.sleep(0)  # let them all reach the load (an event, not a wait for time: one loop turn)
        assert not any(t.done() for t in waiting)
        engine.gate.set()
        choices = await asyncio.gather(*waiting)
        assert engine.calls == [("base-1", "/v1/load_lora_adapter",
                                 {"lora_name": "a", "lora_path": "/var/cache/llmgw/a"})]
        assert events == [("a", "load")]
        assert {c.replica.id for c in choices if c is not None} == {"base-1"}
        held = choices[0]
        assert held is not None and held.held.in_flight == 5
        for c in choices:
            assert c is not None
            loras.release(c)
        # The next adapter evicts `a` (idle now) before loading.
        b = await loras.acquire(_entry(table, "b"), list(_entry(table, "b").replicas), _never)
        assert b is not None
        assert [c[1:] for c in engine.calls[1:]] == [("/v1/unload_lora_adapter", {"lora_name": "a"}),
                                                     ("/v1/load_lora_adapter",
                                                      {"lora_name": "b", "lora_path": "/var/cache/llmgw/b"})]
        assert events[1:] == [("a", "unload"), ("b", "load")]

    asyncio.run(scenario())


def test_a_failed_load_is_a_503_with_the_engines_reason_for_every_waiter() -> None:
    async def scenario() -> None:
        table = _table(max_loras=1, replicas=1)
        engine = Engine(status=500, text="CUDA out of memory")
        events: list[tuple[str, str]] = []
        loras = RuntimeLoras(engine.post, lambda a, e: events.append((a, e)))
        a = _entry(table, "a")
        engine.gate.set()
        results = await asyncio.gather(*(loras.acquire(a, list(a.replicas), _never) for _ in range(3)),
                                       return_exceptions=True)
        assert len(engine.calls) == 1 and events == [("a", "load_failure")]
        for r in results:
            assert isinstance(r, RouterError) and r.status == 503 and r.code == "adapter_load_failed"
            assert "answered 500: CUDA out of memory" in r.message
        assert loras.book.loaded(table.replicas["base-1"]) == []  # the slot is free for the next try

    asyncio.run(scenario())


def test_no_room_anywhere_is_a_503_that_says_why() -> None:
    async def scenario() -> None:
        table = _table(max_loras=1, replicas=1)
        engine = Engine()
        engine.gate.set()
        loras = RuntimeLoras(engine.post, lambda a, e: None)
        a, b = _entry(table, "a"), _entry(table, "b")
        held = await loras.acquire(a, list(a.replicas), _never)
        assert held is not None
        with pytest.raises(RouterError) as err:
            await loras.acquire(b, list(b.replicas), _never)
        assert err.value.status == 503 and err.value.code == "adapter_unavailable"
        assert "each holds 1 adapters (its max_loras) with requests in flight" in err.value.message

    asyncio.run(scenario())


def test_an_engine_that_has_it_already_counts_as_loaded() -> None:
    """Another router worker loaded it first (each worker keeps its own book)."""
    async def scenario() -> None:
        table = _table(max_loras=1, replicas=1)
        engine = Engine(status=400, text="The lora adapter 'a' has already been loaded.")
        engine.gate.set()
        events: list[tuple[str, str]] = []
        loras = RuntimeLoras(engine.post, lambda a, e: events.append((a, e)))
        a = _entry(table, "a")
        assert await loras.acquire(a, list(a.replicas), _never) is not None
        assert events == [("a", "load")]

    asyncio.run(scenario())
