"""The Batch API's store (llmgw/store/batches.py) on SQLite and on PostgreSQL: owners see
only their own, one runner holds a batch's lease, a request is started once, ends count."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from llmgw.errors import StoreError
from llmgw.store import Store, open_store
from llmgw.store.batches import BatchLine, BatchRecord, BatchStore, FileRecord


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def bstore(request: pytest.FixtureRequest) -> Iterator[BatchStore]:
    if request.param == "sqlite":
        store: Store = request.getfixturevalue("sqlite_store")
        yield BatchStore(store)
        return
    store = open_store(request.getfixturevalue("pg_url"))
    try:
        yield BatchStore(store)
    finally:
        store.close()


def _batch(bid: str, owner: str = "group:a", *, created: int = 1000,
           lines: int = 3) -> tuple[BatchRecord, list[BatchLine]]:
    b = BatchRecord(bid, owner, "key1", "/v1/chat/completions", "tiny", "file-in", "24h", "validating", created,
                    created + 86400, metadata={"job": "x"})
    return b, [BatchLine(i + 1, f"c{i + 1}", i * 10, 9) for i in range(lines)]


def test_files_are_their_owners_and_listed_in_order(bstore: BatchStore) -> None:
    for i in range(3):
        bstore.add_file(FileRecord(f"file-{i}", "group:a", "batch", f"f{i}.jsonl", 10 + i, 100 + i))
    bstore.add_file(FileRecord("file-other", "key:zz", "batch", "theirs.jsonl", 5, 200))
    assert bstore.get_file("group:a", "file-other") is None
    assert bstore.get_file("key:zz", "file-other") is not None
    assert [f.id for f in bstore.list_files("group:a")] == ["file-2", "file-1", "file-0"]
    assert [f.id for f in bstore.list_files("group:a", after="file-2", limit=1)] == ["file-1"]
    assert [f.id for f in bstore.list_files("group:a", descending=False, after="file-0")] == ["file-1", "file-2"]
    assert bstore.list_files("group:a", purpose="batch_output") == []
    assert not bstore.delete_file("group:a", "file-other")  # not theirs: nothing deleted
    assert bstore.get_file("key:zz", "file-other") is not None


def test_an_input_file_cannot_be_deleted_while_its_batch_runs(bstore: BatchStore) -> None:
    bstore.add_file(FileRecord("file-in", "group:a", "batch", "in.jsonl", 30, 100))
    bstore.create_batch(*_batch("batch_1"))
    with pytest.raises(StoreError, match="input of batch batch_1"):
        bstore.delete_file("group:a", "file-in")


def test_batch_round_trip_and_cancel(bstore: BatchStore) -> None:
    b, lines = _batch("batch_1")
    bstore.create_batch(b, lines)
    got = bstore.get_batch("batch_1", "group:a")
    assert got is not None and got.total == 3 and got.metadata == {"job": "x"} and got.status == "validating"
    assert bstore.get_batch("batch_1", "group:b") is None
    assert bstore.cancel_batch("group:b", "batch_1", 1001) is None
    cancelled = bstore.cancel_batch("group:a", "batch_1", 1001)
    assert cancelled is not None and cancelled.status == "cancelling" and cancelled.times["cancelling_at"] == 1001
    bstore.create_batch(*_batch("batch_2", created=1002))
    assert [x.id for x in bstore.list_batches("group:a")] == ["batch_2", "batch_1"]
    assert [x.id for x in bstore.list_batches("group:a", after="batch_2")] == ["batch_1"]


def test_one_runner_holds_a_lease_until_it_expires(bstore: BatchStore) -> None:
    bstore.create_batch(*_batch("batch_1"))
    first = bstore.claim("r1", 2000.0, 30.0)
    assert first is not None and first.id == "batch_1"
    assert bstore.claim("r2", 2010.0, 30.0) is None  # held
    assert bstore.renew("batch_1", "r1", 2020.0, 30.0)
    assert bstore.claim("r2", 2049.0, 30.0) is None  # renewed to 2050
    assert not bstore.renew("batch_1", "r2", 2049.0, 30.0)  # not its lease
    taken = bstore.claim("r2", 2051.0, 30.0)  # r1 stopped renewing
    assert taken is not None and taken.lease_owner == "r2"
    assert not bstore.renew("batch_1", "r1", 2052.0, 30.0)  # r1 lost it for good


def test_a_request_starts_once_and_only_under_the_lease(bstore: BatchStore) -> None:
    bstore.create_batch(*_batch("batch_1"))
    assert bstore.claim("r1", 2000.0, 30.0) is not None
    assert not bstore.start("batch_1", 1, "r1", 2001.0)  # still validating: nothing is sent
    assert bstore.set_status("batch_1", "r1", "in_progress", 2001, only_from="validating")
    assert not bstore.set_status("batch_1", "r1", "in_progress", 2001, only_from="validating")
    assert not bstore.start("batch_1", 1, "r2", 2001.0)  # another router's start is refused
    assert bstore.start("batch_1", 1, "r1", 2001.0)
    assert not bstore.start("batch_1", 1, "r1", 2001.0)  # started already
    assert not bstore.start("batch_1", 2, "r1", 2040.0)  # the lease ran out
    assert [p.line for p in bstore.pending("batch_1", 2001.0, 10)] == [2, 3]
    # r1 dies; r2 takes over and finds line 1 started, never finished.
    assert bstore.claim("r2", 2040.0, 30.0) is not None
    assert [o.custom_id for o in bstore.orphans("batch_1")] == ["c1"]
    bstore.finish("batch_1", [(1, False, json.dumps({"custom_id": "c1"}), 0, 0)])
    assert bstore.orphans("batch_1") == []
    assert bstore.start("batch_1", 2, "r2", 2041.0)
    bstore.unstart("batch_1", 2, 2100.0)  # refused before sending: pending again, later
    assert [p.line for p in bstore.pending("batch_1", 2041.0, 10)] == [3]
    assert [p.line for p in bstore.pending("batch_1", 2100.0, 10)] == [2, 3]
    assert bstore.start("batch_1", 2, "r2", 2041.0) and bstore.start("batch_1", 3, "r2", 2041.0)
    bstore.finish("batch_1", [(2, True, '{"custom_id": "c2"}', 5, 7), (3, True, '{"custom_id": "c3"}', 4, 6)])
    bstore.finish("batch_1", [(3, True, '{"custom_id": "c3"}', 4, 6)])  # twice: counted once
    got = bstore.get_batch("batch_1")
    assert got is not None and (got.completed, got.failed, got.input_tokens, got.output_tokens) == (2, 1, 9, 13)
    assert bstore.results("batch_1", "done") == ['{"custom_id": "c2"}', '{"custom_id": "c3"}']
    assert bstore.pending_count("batch_1") == 0
    out = FileRecord("file-out", "group:a", "batch_output", "batch_1_output.jsonl", 40, 2050)
    assert not bstore.complete("batch_1", "r1", "completed", 2050, [out], "file-out", None)  # not r1's
    assert bstore.complete("batch_1", "r2", "completed", 2050, [out], "file-out", None)
    done = bstore.get_batch("batch_1")
    assert done is not None and done.status == "completed" and done.output_file_id == "file-out"
    assert done.times["completed_at"] == 2050 and done.lease_owner is None
    assert bstore.get_file("group:a", "file-out") is not None
    assert bstore.claim("r3", 9999.0, 30.0) is None  # ended: nobody runs it again
    with pytest.raises(StoreError, match="its status is 'completed'"):
        bstore.cancel_batch("group:a", "batch_1", 2060)
