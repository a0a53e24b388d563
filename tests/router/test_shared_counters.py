"""The workers' shared counters (router/shared.py), within one process: several views of one
memfd stand for the workers and the supervisor (test_router_workers.py runs real processes)."""

from __future__ import annotations

import os

import pytest

from llmgw.router.shared import SharedRuntime, SharedTable
from llmgw.router.table import RoutingTable
from llmgw.state import Replica, Shard, State


def rec(rid: str) -> Replica:
    return Replica(id=rid, model="m", profile="p", engine="llamacpp", state="ready", endpoint="http://127.0.0.1:9",
                   shards=[Shard(node="n", rank=0, port=9, unit=f"llmgw-{rid}-0.service")])


@pytest.fixture
def table() -> SharedTable:
    return SharedTable.create(rows=3, slots=4)


def test_every_worker_counts_in_its_row_and_readers_sum(table: SharedTable) -> None:
    w0, w1 = SharedTable(table.fd, row=0), SharedTable(table.fd, row=1)
    a, b, seen = SharedRuntime(rec("r1"), w0), SharedRuntime(rec("r1"), w1), SharedRuntime(rec("r1"), table)
    assert seen.last_used is None
    a.begin()
    a.begin()
    b.begin()
    assert (seen.in_flight, seen.requests, seen.in_flight_by_worker) == (3, 3, [2, 1, 0])
    assert seen.last_used is not None and seen.last_active >= seen.first_seen
    assert a.in_flight == b.in_flight == 3  # a worker's least-load pick sees the others' load
    b.end()
    assert seen.in_flight_by_worker == [2, 0, 0]
    with pytest.raises(RuntimeError):
        seen.begin()  # the supervisor reads only


def test_processes_agree_on_slots_and_a_full_table_reuses_a_gone_idle_one(table: SharedTable) -> None:
    w0, w1 = SharedTable(table.fd, row=0), SharedTable(table.fd, row=1)
    assert [w0.slot(f"r{i}") for i in range(4)] == [0, 1, 2, 3]
    assert [w1.slot(f"r{i}") for i in (3, 1)] == [3, 1]  # found by id, not by order
    busy = SharedRuntime(rec("r0"), w0)
    busy.begin()
    # Full: r0 is busy, r1 and r3 are in the state; r2 is neither, so its slot is reused, zeroed.
    done = SharedRuntime(rec("r2"), w1)
    done.begin()
    done.end()
    assert w0.slot("new", live=["r1", "r3"]) == 2
    assert SharedRuntime(rec("new"), table).requests == 0  # r2's counts do not carry over
    with pytest.raises(RuntimeError, match="busy"):
        w1.slot("another", live=["r1", "r3", "new"])


def test_a_dead_workers_row_is_cleared_but_its_requests_stay_counted(table: SharedTable) -> None:
    w1 = SharedTable(table.fd, row=1)
    r = SharedRuntime(rec("r1"), w1)
    r.begin()
    r.begin()
    w1.routing_by(7)
    table.clear_row(1)
    seen = SharedRuntime(rec("r1"), table)
    assert (seen.in_flight, seen.requests) == (0, 2)
    assert table.serials[1] == 0


def test_the_router_holds_the_lowest_serial_of_its_workers(table: SharedTable) -> None:
    for row, serial in ((0, 5), (1, 4), (2, 5)):
        SharedTable(table.fd, row=row).routing_by(serial)
    assert table.held_serial() == 4


def test_tables_keep_shared_runtimes_across_reloads(table: SharedTable) -> None:
    w0 = SharedTable(table.fd, row=0)

    def make(record: Replica, live: object) -> SharedRuntime:
        return SharedRuntime(record, w0)

    t1 = RoutingTable(State(lineage="x", serial=1, replicas=[rec("r1")]), runtime=make)
    t1.replicas["r1"].begin()
    t2 = RoutingTable(State(lineage="x", serial=2, replicas=[rec("r1"), rec("r2")]), t1.replicas, runtime=make)
    assert t2.replicas["r1"] is t1.replicas["r1"] and t2.replicas["r1"].in_flight == 1
    assert isinstance(t2.replicas["r2"], SharedRuntime)


def test_only_our_table_is_accepted() -> None:
    fd = os.memfd_create("not-counters")
    os.ftruncate(fd, 4096)
    with pytest.raises(ValueError, match="shared counters"):
        SharedTable(fd)
    os.close(fd)
