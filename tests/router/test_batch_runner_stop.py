"""A router asked to stop starts no more batch requests, even one that was waiting for a slot
when the stop came (llmgw.router.batch_runner): a request started after the stop could
still be in flight when the drain's time is up and would then be failed as interrupted,
where left pending it is the next router's to send.

The runner's own loop against the real SQLite batch store; the dispatch is a stand-in that
holds every request until the test lets it answer (the router's proxy is not under test)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from llmgw.router.batch_files import FileDir
from llmgw.router.batch_runner import BatchRunner
from llmgw.router.principal import Principal
from llmgw.router.settings import RouterSettings
from llmgw.store import Store
from llmgw.store.batches import BatchLine, BatchRecord, BatchStore
from tests.support.waiting import turns

# Two slots, held by the first batch: the second batch's requests wait for one to free.
S = RouterSettings(batch_concurrency=2, batch_max_running=2, batch_poll_interval=0.05, batch_lease_ttl=30.0)


def _batch(bstore: BatchStore, files: FileDir, batch_id: str, n: int) -> None:
    lines = [json.dumps({"custom_id": f"{batch_id}-{i}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "m", "messages": [{"role": "user", "content": f"{batch_id} {i}"}]}})
             for i in range(n)]
    files.write(f"file-{batch_id}", lines)
    offsets, at = [], 0
    for ln in lines:
        offsets.append((at, len(ln)))
        at += len(ln) + 1
    record = BatchRecord(batch_id, "key:k", "k", "/v1/chat/completions", "m", f"file-{batch_id}", "24h",
                         "validating", 1000, 2**40)
    bstore.create_batch(record, [BatchLine(i + 1, f"{batch_id}-{i}", s, ln) for i, (s, ln) in enumerate(offsets)])


async def test_a_stop_leaves_what_waited_for_a_slot_pending(tmp_path: Path, sqlite_store: Store) -> None:
    bstore = BatchStore(sqlite_store)
    files = FileDir(tmp_path / "files")
    _batch(bstore, files, "batch_a", 2)
    gate = asyncio.Event()
    sent: list[str] = []

    async def dispatch(_p: Principal, _path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        sent.append(json.loads(body)["messages"][0]["content"])
        await gate.wait()
        return 200, {}, json.dumps({"usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

    principal = Principal("k", "k", None, ())
    runner = BatchRunner(bstore, files, dispatch, lambda _k: principal, S)
    task = asyncio.create_task(runner.run())
    runner.poke()
    await turns(lambda: sorted(sent) == ["batch_a 0", "batch_a 1"], "the first batch holding both slots")
    _batch(bstore, files, "batch_b", 2)
    runner.poke()
    # The second batch's first request waits for a slot (the semaphore's queue of waiters).
    await turns(lambda: len(runner.running) == 2 and len(runner.slots._waiters or ()) == 1,
                "the second batch waiting for a slot")

    runner.stop_sending()  # SIGTERM: the listeners close meanwhile
    gate.set()  # what was sent is answered, and frees the slots the other batch waited for
    await runner.drain(S.batch_lease_ttl)
    assert not runner.running
    assert sorted(sent) == ["batch_a 0", "batch_a 1"]  # nothing started after the stop
    assert bstore.pending_count("batch_b") == 2  # the next router sends them
    assert bstore.pending_count("batch_a") == 0 and len(bstore.results("batch_a", "done")) == 2
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
