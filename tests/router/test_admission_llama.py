"""Admission through the real router in front of real llama-server replicas.

Two replicas of one slot each (`--parallel 1`, router `max_in_flight=1`): two requests
at a time reach the engines, the rest wait in the router. Load comes from separate
processes (tests/support/tenant_load.py), so their client work never holds the
interpreter lock of the router, which runs in a thread here.

What is asserted is order and counts, read from each response's `x-llmgw-queue-passed`
(how many requests of the model started while it waited in the router): a light group's
request gets the first free slot however many a heavy group has waiting, an interactive
request the first free slot however many batch ones wait. Times to first token are
printed, not asserted: on a two-core machine the engines, the load and the router share
the cores, so loaded times grow with the machine's load as well as with any queue;
bench/tenants/run.py prints them as ratios, beside the same load without admission.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from llmgw.router import RouterSettings
from llmgw.store import Store
from tests.support.router import FAST, Engine, RunningRouter, StateFile, model, replica
from tests.support.tenant_load import Timed, load, one_request, queue_length, ttft_p50
from tests.support.waiting import wait_until

pytestmark = pytest.mark.engine

WORDS = 200  # a prompt whose prefill is most of a request: two tokens are generated
MAX_TOKENS = 2


@pytest.fixture
def fleet(engines: Callable[..., Engine], state: StateFile) -> StateFile:
    es = [engines(f"e{i}", parallel=1) for i in range(2)]
    state.write([model("m")], [replica(f"r{i}", "m", e.endpoint) for i, e in enumerate(es)])
    return state


def light_requests(url: str, key: str, n: int, **kw: Any) -> list[Timed]:
    with httpx.Client(timeout=120) as http:
        out = [one_request(http, url, key, model="m", words=WORDS, max_tokens=MAX_TOKENS, salt=f"light{i}", **kw)
               for i in range(n)]
    assert [t.status for t in out] == [200] * n
    return out


def test_a_light_group_gets_the_next_free_slot_while_a_heavy_one_sends_8x(
        fleet: StateFile, start_router: Callable[..., RunningRouter], sqlite_store: Store) -> None:
    sqlite_store.set_group("light", share=1.0)
    sqlite_store.set_group("heavy", share=1.0)
    light_key = sqlite_store.create_key("light-client", group="light")[1]
    heavy_key = sqlite_store.create_key("heavy-client", group="heavy")[1]
    rr = start_router(fleet.path, settings=dataclasses.replace(FAST, max_in_flight=1))
    light_requests(rr.base_url, light_key, 3)  # warm both engines and the connections
    alone = light_requests(rr.base_url, light_key, 15)
    with load(rr.base_url, heavy_key, 8) as heavy:
        wait_until(lambda: queue_length(rr.admin_url, "heavy") >= 4, 30, "heavy requests waiting in the router")
        loaded = light_requests(rr.base_url, light_key, 15)
        window = (loaded[0].start, loaded[-1].end)
    # Served in the window: ended in it. The other slot is mid-request when the window opens
    # and when it closes, so a request started before it counts and one ending after does not.
    served = [h for h in heavy if h.status == 200 and window[0] <= h.end <= window[1]]
    ratio = ttft_p50(loaded) / ttft_p50(alone)
    print(f"\nlight TTFT p50 alone {ttft_p50(alone) * 1000:.1f} ms; with the heavy group sending 8x "
          f"{ttft_p50(loaded) * 1000:.1f} ms (ratio {ratio:.2f}); light waited in the router "
          f"{statistics.median(t.queue_ms or 0 for t in loaded)} ms p50, heavy "
          f"{statistics.median(h.queue_ms or 0 for h in served)} ms; in the light group's window "
          f"{len(served)} heavy and {len(loaded)} light requests served")
    assert all(h.status == 200 for h in heavy)
    # Queues formed (heavy requests were passed by others while they waited) ...
    assert max(h.passed or 0 for h in served) >= 2
    # ... yet no light request waited behind more than one start: the first slot to free
    # (at most one more when two free at once, or the heavy group's counter was behind).
    assert max(t.passed or 0 for t in loaded) <= 1, [t.passed for t in loaded]
    # Not starved: with one client the light group holds at most one of the two slots, so the
    # heavy group finishes about as many in the window (one fewer where the window closes
    # before the other slot's request ends).
    assert len(served) >= len(loaded) - 1


def test_with_headroom_a_light_groups_request_finds_a_free_slot_while_a_heavy_one_sends_8x(
        fleet: StateFile, start_router: Callable[..., RunningRouter], sqlite_store: Store) -> None:
    """`headroom_slots=1` over two one-slot replicas: the heavy group never takes the last free
    slot while it holds one, so no light request waits for a start; the heavy group is still
    served (it keeps one replica busy)."""
    sqlite_store.set_group("light", share=1.0)
    sqlite_store.set_group("heavy", share=1.0)
    light_key = sqlite_store.create_key("light-client", group="light")[1]
    heavy_key = sqlite_store.create_key("heavy-client", group="heavy")[1]
    rr = start_router(fleet.path, settings=dataclasses.replace(FAST, max_in_flight=1, headroom_slots=1))
    light_requests(rr.base_url, light_key, 3)
    alone = light_requests(rr.base_url, light_key, 15)
    with load(rr.base_url, heavy_key, 8) as heavy:
        wait_until(lambda: queue_length(rr.admin_url, "heavy") >= 4, 30, "heavy requests waiting in the router")
        loaded = light_requests(rr.base_url, light_key, 15)
        window = (loaded[0].start, loaded[-1].end)
    served = [h for h in heavy if h.status == 200 and window[0] <= h.end <= window[1]]  # finished meanwhile
    print(f"\nheadroom 1: light TTFT p50 alone {ttft_p50(alone) * 1000:.1f} ms, with the heavy group sending 8x "
          f"{ttft_p50(loaded) * 1000:.1f} ms (ratio {ttft_p50(loaded) / ttft_p50(alone):.2f}); "
          f"{len(served)} heavy requests finished in the light group's window")
    assert all(h.status == 200 for h in heavy)
    assert [t.passed for t in loaded] == [0] * len(loaded)  # every light request found a free slot
    assert served, "the heavy group is not starved"


def test_batch_traffic_never_delays_interactive_by_more_than_the_request_it_is_serving(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    """One slot, a group at `batch` priority keeping 6 requests outstanding, one interactive
    client: each interactive request starts at the next free slot (no batch request starts
    while it waits), and batch work still runs between interactive requests."""
    state.write([model("m")], [replica("r0", "m", engines("e0", parallel=1).endpoint)])
    sqlite_store.set_group("bulk", priority="batch")
    sqlite_store.set_group("users")
    bulk_key = sqlite_store.create_key("bulk-client", group="bulk")[1]
    user_key = sqlite_store.create_key("user-client", group="users")[1]
    rr = start_router(state.path, settings=dataclasses.replace(FAST, max_in_flight=1))
    with load(rr.base_url, bulk_key, 6) as bulk:
        wait_until(lambda: queue_length(rr.admin_url, "bulk", "batch") >= 4, 30, "batch requests waiting in the router")
        inter = light_requests(rr.base_url, user_key, 12)
        window = (inter[0].start, inter[-1].end)
    batch_served = [b for b in bulk if b.status == 200 and window[0] <= b.start and b.end <= window[1]]
    print(f"\ninteractive p50 wait in the router {statistics.median(t.queue_ms or 0 for t in inter)} ms, "
          f"batch {statistics.median(b.queue_ms or 0 for b in batch_served)} ms; "
          f"{len(batch_served)} batch requests served meanwhile")
    assert [t.passed for t in inter] == [0] * len(inter)
    assert batch_served, "batch work is not starved by an interactive client that leaves gaps"
    assert max(b.passed or 0 for b in batch_served) >= 1  # batch ones were passed: a queue formed


def test_the_router_learns_each_engines_slots_and_queues_beyond_them(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    """No `max_in_flight` set: llama-server's own `--parallel` (its /props) is the target."""
    state.write([model("m")], [replica("r0", "m", engines("e0", parallel=3).endpoint),
                               replica("r1", "m", engines("e1", parallel=1).endpoint)])
    rr = start_router(state.path)
    admission = rr.server.router.admission  # type: ignore[union-attr]
    wait_until(lambda: admission.capacity("m") == 4, 30, "the engines' slots learnt")
    with load(rr.base_url, api_key, 6):
        wait_until(lambda: queue_length(rr.admin_url, "-") >= 1, 30, "requests waiting beyond 4 in flight")
        in_flight = sum(r["in_flight"] for r in rr.admin("/api/v1/replicas")["replicas"])
        assert in_flight <= 4


def test_the_openai_client_sees_priority_refusals_and_a_full_queue_as_openai_errors(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    state.write([model("m")], [replica("r0", "m", engines("e0", parallel=1, ctx=8192).endpoint)])
    sqlite_store.set_group("bulk", priority="batch")
    key = sqlite_store.create_key("bulk-client", group="bulk")[1]
    settings: RouterSettings = dataclasses.replace(FAST, max_in_flight=1, max_queue=1)
    rr = start_router(state.path, settings=settings)
    client = rr.client(key)
    with pytest.raises(openai.PermissionDeniedError) as up:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1,
                                       extra_headers={"x-llmgw-priority": "interactive"})
    assert up.value.code == "priority_not_allowed" and "--may-choose-priority yes" in up.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1,
                                       extra_headers={"x-llmgw-priority": "soon"})
    assert bad.value.code == "invalid_priority"
    # Fill the one slot and the one place in the queue with long generations, then one more.
    long = {"model": "m", "messages": [{"role": "user", "content": "go on"}], "max_tokens": 6000}
    results: list[int] = []

    def send() -> None:
        r = httpx.post(rr.base_url + "/v1/chat/completions", json=long, timeout=120,
                       headers={"Authorization": f"Bearer {key}"})
        results.append(r.status_code)

    threads = [threading.Thread(target=send) for _ in range(2)]
    threads[0].start()
    wait_until(lambda: rr.replica("r0")["in_flight"] == 1, 30, "the first request on the engine")
    threads[1].start()
    wait_until(lambda: queue_length(rr.admin_url, "bulk", "batch") == 1, 30, "the second waiting in the router")
    with pytest.raises(openai.RateLimitError) as full:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert full.value.code == "server_overloaded"
    assert full.value.response.headers["retry-after"] == str(settings.retry_after)
    # The tokenizer takes no slot of the engine: it is answered while the model is full.
    tok = httpx.post(rr.base_url + "/v1/tokenize", json={"model": "m", "content": "hello"}, timeout=30,
                     headers={"Authorization": f"Bearer {key}"})
    assert tok.status_code == 200 and tok.json()["tokens"]
    for t in threads:
        t.join(120)
    assert results == [200, 200]
    text = httpx.get(rr.admin_url + "/metrics", timeout=10).text
    assert 'llmgw_admission_refused_total{group="bulk",model="m",priority="batch",reason="queue_full"} 1.0' in text
    assert 'llmgw_rejected_requests_total{reason="admission"} 1.0' in text
