"""Admission's async side (admission.py) on a real routing table, and the group settings
it reads (store, key cache, `llmgw keys group`): no engine needed, nothing faked.

The replicas here are records in a state; admission only counts their slots, so none of
them needs to run. Orders and counts are asserted, never durations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmgw.router.admission import Admission, replica_slots, requested_priority
from llmgw.router.auth import KeyCache
from llmgw.router.engine_keys import EngineKeys
from llmgw.router.metrics import RouterMetrics
from llmgw.router.ondemand import OnDemand
from llmgw.router.openai_errors import RouterError
from llmgw.router.principal import Tenancy
from llmgw.router.settings import RouterSettings
from llmgw.router.slots import SlotCounts
from llmgw.router.table import RoutingTable
from llmgw.state import State
from llmgw.store import Store, open_store
from llmgw.store.model import Priority
from tests.support.cli import run_cli
from tests.support.router import model, replica

S = RouterSettings(max_queue=4, queue_timeout=30.0, retry_after=2)


def table(n: int = 1, state: str = "ready") -> RoutingTable:
    replicas = [replica(f"r{i}", "m", f"http://127.0.0.1:{9000 + i}", state) for i in range(n)]
    return RoutingTable(State(models=[model("m")], replicas=replicas))


def tenancy(group: str, priority: Priority = "interactive", **kw: object) -> Tenancy:
    return Tenancy(group, priority=priority, **kw)  # type: ignore[arg-type]


async def hold(adm: Admission, group: str, order: list[str], release: asyncio.Event, *,
               priority: Priority | None = None, tag: str | None = None) -> None:
    async with adm.slot("m", tenancy(group), priority, cost=100):
        order.append(tag or group)
        await release.wait()


async def until(pred: object, what: str) -> None:
    """Yield to the loop until `pred()`; a bounded number of turns, not a sleep for time."""
    for _ in range(10_000):
        if pred():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


def test_a_replica_has_the_slots_its_engine_reported_unless_the_setting_says(tmp_path: Path) -> None:
    t = table()
    counts = SlotCounts(S, lambda: t, EngineKeys(tmp_path / "engine-keys.json"))
    r = t.replicas["r0"]
    assert replica_slots(r, S, counts) == 0  # not known yet: no router limit, the engine's queue decides
    counts.known["r0"] = (r.endpoint, 3)
    assert replica_slots(r, S, counts) == 3
    assert replica_slots(r, RouterSettings(max_in_flight=7), counts) == 7
    counts.known["r0"] = ("http://127.0.0.1:1", 3)  # learnt from an older process at another address
    assert replica_slots(r, S, counts) == 0


def test_a_replica_without_an_engine_answer_has_the_slots_apply_recorded(tmp_path: Path) -> None:
    """vLLM and SGLang say nothing of their slots: the state's `max_running` (what apply read of
    their command line) is the target, below the profile's and the router's `max_in_flight`
    and what an engine says itself."""
    r0 = replica("r0", "m", "http://127.0.0.1:9000").model_copy(update={"engine": "vllm", "max_running": 128})
    t = RoutingTable(State(models=[model("m")], replicas=[r0]))
    counts = SlotCounts(S, lambda: t, EngineKeys(tmp_path / "engine-keys.json"))
    r = t.replicas["r0"]
    assert replica_slots(r, S, counts) == 128
    assert Admission(S, lambda: t, slots=counts).capacity("m") == 128
    assert replica_slots(r, RouterSettings(max_in_flight=7), counts) == 7
    assert replica_slots(r, S, counts, model("m").model_copy(update={"max_in_flight": {r.record.profile: 5}})) == 5
    counts.known["r0"] = (r.endpoint, 3)
    assert replica_slots(r, S, counts) == 3


def test_capacity_sums_routable_replicas_and_splits_between_workers() -> None:
    t = table(3)
    two = dataclasses.replace(S, max_in_flight=2)
    assert Admission(two, lambda: t).capacity("m") == 6
    assert [Admission(two, lambda: t, workers=4, index=i).capacity("m") for i in range(4)] == [2, 2, 1, 1]
    t.replicas["r0"].mark_failure("down", base=30, cap=30)  # ejected: its slots are not there
    assert Admission(two, lambda: t).capacity("m") == 4
    assert Admission(S, lambda: t).capacity("m") == 0  # no slots known: no limit
    assert Admission(two, lambda: table(1, "starting")).capacity("m") == 0  # none ready: no limit here
    assert Admission(two, lambda: t).capacity("unknown") == 0


async def test_requests_beyond_capacity_wait_and_start_as_slots_free() -> None:
    t = table(1)
    adm = Admission(dataclasses.replace(S, max_in_flight=1), lambda: t)
    order: list[str] = []
    gates = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(hold(adm, "g", order, gates[i], tag=f"g{i}")) for i in range(3)]
    await until(lambda: adm.scheduler.queue("m").queued == 2, "two waiting")
    assert order == ["g0"]
    # A queue is load: the router's report to the controller's demand scaling counts it.
    demand = OnDemand(SimpleNamespace(name="router-1"), S, lambda: t, asyncio.Event, lambda: None)  # type: ignore[arg-type]
    demand.queued = adm.queued
    assert demand.report()["waiting"] == {"m": 2}
    gates[0].set()
    await until(lambda: order == ["g0", "g1"], "g1 started")
    gates[1].set()
    gates[2].set()
    await asyncio.gather(*tasks)
    assert order == ["g0", "g1", "g2"] and "m" not in adm.scheduler.models


async def test_interactive_goes_before_batch_and_a_light_group_before_a_heavy_one() -> None:
    t = table(1)
    adm = Admission(dataclasses.replace(S, max_in_flight=1, max_queue=100), lambda: t)
    order: list[str] = []
    gate = asyncio.Event()
    first = asyncio.create_task(hold(adm, "heavy", order, gate, tag="first"))
    await until(lambda: order == ["first"], "first running")
    tasks = [asyncio.create_task(hold(adm, "bulk", order, gate, priority="batch", tag="batch")) for _ in range(3)]
    tasks += [asyncio.create_task(hold(adm, "heavy", order, gate)) for _ in range(3)]
    await until(lambda: adm.scheduler.queue("m").queued == 6, "six waiting")
    tasks.append(asyncio.create_task(hold(adm, "light", order, gate)))
    await until(lambda: adm.scheduler.queue("m").queued == 7, "light waiting")
    gate.set()
    await asyncio.gather(first, *tasks)
    # heavy was charged for `first`: light (lifted to heavy's counter, holding no slot) goes
    # first, then the groups alternate by tokens; batch only when no interactive one waits.
    assert order == ["first", "light", "heavy", "heavy", "heavy", "batch", "batch", "batch"]


async def test_a_full_queue_refuses_with_429_and_a_wait_that_runs_out_with_503() -> None:
    t = table(1)
    adm = Admission(dataclasses.replace(S, max_in_flight=1, max_queue=1), lambda: t)
    order: list[str] = []
    gate = asyncio.Event()
    running = asyncio.create_task(hold(adm, "g", order, gate))
    waiting = asyncio.create_task(hold(adm, "g", order, gate, priority="batch", tag="shed"))
    await until(lambda: adm.scheduler.queue("m").queued == 1, "one waiting")
    with pytest.raises(RouterError) as full:
        async with adm.slot("m", tenancy("g"), "batch"):
            pass
    assert (full.value.status, full.value.code, full.value.headers) == (429, "server_overloaded", {"Retry-After": "2"})
    # An interactive newcomer takes the place of the waiting batch request, which is shed.
    newcomer = asyncio.create_task(hold(adm, "g", order, gate, tag="newcomer"))
    with pytest.raises(RouterError) as shed:
        await waiting
    assert shed.value.status == 429
    timed = Admission(dataclasses.replace(S, max_in_flight=1, queue_timeout=0.01), lambda: t)
    other_gate = asyncio.Event()
    blocker = asyncio.create_task(hold(timed, "g", [], other_gate))
    await until(lambda: timed.scheduler.queue("m").running == 1, "blocker running")
    with pytest.raises(RouterError) as late:
        async with timed.slot("m", tenancy("g")):
            pass
    assert (late.value.status, late.value.code, late.value.headers["Retry-After"]) == (503, "queue_timeout", "2")
    assert timed.scheduler.queue("m").queued == 0
    gate.set()
    other_gate.set()
    await asyncio.gather(running, newcomer, blocker)
    assert order == ["g", "newcomer"]


async def test_a_cancelled_waiter_leaves_the_queue_and_metrics_count_every_outcome() -> None:
    t = table(1)
    metrics = RouterMetrics(lambda: t)
    adm = Admission(dataclasses.replace(S, max_in_flight=1), lambda: t, metrics=metrics)
    gate = asyncio.Event()
    running = asyncio.create_task(hold(adm, "g", [], gate))
    await until(lambda: adm.scheduler.queue("m").running == 1, "running")
    gone = asyncio.create_task(hold(adm, "g", [], gate))
    await until(lambda: adm.scheduler.queue("m").queued == 1, "waiting")
    text = metrics.render().decode()
    assert 'llmgw_admission_queue_length{group="g",model="m",priority="interactive"} 1.0' in text
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert adm.scheduler.queue("m").queued == 0
    gate.set()
    await running
    text = metrics.render().decode()
    assert 'llmgw_admission_queue_length{group="g",model="m",priority="interactive"} 0.0' in text
    assert 'llmgw_admission_dequeued_total{group="g",model="m",outcome="left",priority="interactive"} 1.0' in text
    assert 'llmgw_admission_wait_seconds_count{group="g",model="m",priority="interactive"} 1.0' in text


def test_a_request_may_lower_its_class_and_raise_it_only_when_its_group_allows() -> None:
    bulk = tenancy("bulk", "batch")
    assert requested_priority(bulk, None, None) == "batch"
    assert requested_priority(bulk, b"background", None) == "background"
    assert requested_priority(tenancy("u"), None, "flex") == "batch"
    assert requested_priority(tenancy("u"), None, "auto") == "interactive"
    with pytest.raises(RouterError) as up:
        requested_priority(bulk, b"interactive", None)
    assert up.value.status == 403 and "llmgw keys group set bulk --may-choose-priority yes" in up.value.message
    assert requested_priority(tenancy("bulk", "batch", may_choose=True), None, "priority") == "interactive"
    with pytest.raises(RouterError) as bad:
        requested_priority(bulk, b"urgent", None)
    assert bad.value.status == 400 and "interactive, batch, background" in bad.value.message
    with pytest.raises(RouterError) as tier:
        requested_priority(bulk, None, 3)
    assert tier.value.status == 400 and tier.value.param == "service_tier"


# -- the group settings ------------------------------------------------------------------
@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = open_store(f"sqlite://{tmp_path / 'store.sqlite'}")
    yield s  # type: ignore[misc]
    s.close()


async def test_a_key_inherits_share_and_priority_from_the_nearest_group_that_sets_them(store: Store) -> None:
    store.set_group("org", share=3.0, priority="batch")
    store.set_group("team", parent="org", may_choose_priority=True)
    store.set_group("solo", share=0.5)
    store.create_key("k1", group="team")
    store.create_key("k2", group="solo")
    store.create_key("k3")
    cache = KeyCache(store)
    await cache.refresh()
    by_name = {p.name: p.tenancy for p in cache.by_hash.values()}
    assert by_name == {"k1": Tenancy("team", 3.0, "batch", True), "k2": Tenancy("solo", 0.5, "interactive", False),
                       "k3": Tenancy("-", 1.0, "interactive", False)}


def test_group_settings_are_checked_and_cleared(store: Store) -> None:
    for bad in ({"share": 0.0}, {"share": float("nan")}, {"share": 2e6}, {"priority": "urgent"}):
        with pytest.raises(Exception, match=r"share must be|priority must be"):
            store.set_group("g", **bad)  # type: ignore[arg-type]
    store.set_group("g", share=2.0, priority="background", may_choose_priority=False)
    g = store.set_group("g", share=None)  # back to inherited; the rest stays
    assert (g.share, g.priority, g.may_choose_priority) == (None, "background", False)
    assert store.list_groups()[0] == g


def test_a_store_made_before_the_settings_gets_their_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE llmgw_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO llmgw_meta VALUES ('schema_version', '3');
        CREATE TABLE llmgw_groups (name TEXT PRIMARY KEY, parent TEXT NULL REFERENCES llmgw_groups(name),
            rpm BIGINT NULL, tokens_per_day BIGINT NULL, created_at TEXT NOT NULL);
        INSERT INTO llmgw_groups VALUES ('old', NULL, 5, NULL, '2026-01-01T00:00:00+00:00');""")
    db.close()
    s = open_store(f"sqlite://{path}")
    try:
        [old] = s.list_groups()
        assert (old.rpm, old.share, old.priority) == (5, None, None)
        assert s.set_group("old", share=4.0).share == 4.0
    finally:
        s.close()


@pytest.mark.postgres
def test_postgres_store_keeps_the_settings(pg_url: str) -> None:
    s = open_store(pg_url)
    try:
        s.set_group("g", share=2.5, priority="batch", may_choose_priority=True)
        [g] = s.list_groups()
        assert (g.share, g.priority, g.may_choose_priority) == (2.5, "batch", True)
    finally:
        s.close()
    again = open_store(pg_url)  # a second open finds the columns there and adds nothing
    try:
        assert again.list_groups()[0].share == 2.5
    finally:
        again.close()


def test_keys_group_set_and_list_show_the_settings(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'cli.sqlite'}"
    done = run_cli("keys", "group", "set", "bulk", "--share", "2", "--priority", "batch", "--store", url, "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["share"] == 2.0
    listed = run_cli("keys", "group", "list", "--store", url, "--json")
    [g] = json.loads(listed.stdout)["groups"]
    assert (g["share"], g["priority"], g["may_choose_priority"]) == (2.0, "batch", None)
    table_out = run_cli("keys", "group", "list", "--store", url)
    assert "SHARE" in table_out.stdout and "batch" in table_out.stdout
    bad = run_cli("keys", "group", "set", "bulk", "--priority", "urgent", "--store", url)
    assert bad.exit_code != 0 and "interactive, batch, background" in bad.stderr
    bad_share = run_cli("keys", "group", "set", "bulk", "--share", "0", "--store", url)
    assert bad_share.exit_code != 0 and "must be above 0" in bad_share.stderr
    cleared = run_cli("keys", "group", "set", "bulk", "--share", "inherit", "--store", url, "--json")
    assert json.loads(cleared.stdout)["share"] is None
