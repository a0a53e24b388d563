"""What a router tells the controller of its queue: the longest wait in admission's queue, and
its batches' requests not sent yet (ondemand.py's report; admission.py, batch_runner.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

from llmgw.router.admission import Admission
from llmgw.router.batch_files import FileDir
from llmgw.router.batch_runner import BatchRunner
from llmgw.router.ondemand import OnDemand
from llmgw.router.principal import Principal, Tenancy
from llmgw.router.settings import RouterSettings
from llmgw.router.table import RoutingTable
from llmgw.state import State
from llmgw.store import Store
from llmgw.store.batches import BatchLine, BatchRecord, BatchStore
from tests.support.router import model, replica
from tests.support.waiting import turns

S = RouterSettings(max_queue=8, queue_timeout=30.0, max_in_flight=1, batch_concurrency=2, batch_poll_interval=0.05)


def table() -> RoutingTable:
    return RoutingTable(State(models=[model("m", aliases=("mm",))],
                              replicas=[replica("r0", "m", "http://127.0.0.1:9000")]))


async def test_the_longest_wait_in_the_queue_is_reported_per_model() -> None:
    t = table()
    now = [100.0]
    adm = Admission(S, lambda: t, clock=lambda: now[0])
    release = asyncio.Event()

    async def hold() -> None:
        async with adm.slot("m", Tenancy("g")):
            await release.wait()

    tasks = [asyncio.create_task(hold())]
    await turns(lambda: adm.scheduler.queue("m").running == 1, "one running")
    assert adm.queue_wait() == {}  # nobody waits
    tasks.append(asyncio.create_task(hold()))
    await turns(lambda: adm.scheduler.queue("m").queued == 1, "one waiting")
    now[0] = 112.5
    tasks.append(asyncio.create_task(hold()))  # a newer waiter: the oldest one's wait is reported
    await turns(lambda: adm.scheduler.queue("m").queued == 2, "two waiting")
    demand = OnDemand(SimpleNamespace(name="router-1"), S, lambda: t, asyncio.Event, lambda: None)  # type: ignore[arg-type]
    demand.queued, demand.queue_wait = adm.queued, adm.queue_wait
    got = demand.report()
    assert got["waiting"] == {"m": 2} and got["queue_wait_s"] == {"m": 12.5}
    release.set()
    await asyncio.gather(*tasks)
    assert demand.report()["queue_wait_s"] == {}


async def test_a_running_batchs_requests_not_sent_are_its_models_backlog_until_sent(
        tmp_path: Path, sqlite_store: Store) -> None:
    bstore = BatchStore(sqlite_store)
    files = FileDir(tmp_path / "files")
    lines = [json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "mm", "messages": [{"role": "user", "content": "hi"}]}})
             for i in range(6)]
    files.write("file-in", lines)
    offsets, at = [], 0
    for ln in lines:
        offsets.append((at, len(ln)))
        at += len(ln) + 1
    record = BatchRecord("batch_1", "key:k", "k", "/v1/chat/completions", "mm", "file-in", "24h", "validating",
                         1000, 2**40)
    bstore.create_batch(record, [BatchLine(i + 1, f"c{i}", s, n) for i, (s, n) in enumerate(offsets)])
    gate = asyncio.Event()
    sent: list[bytes] = []

    async def dispatch(_p: Principal, _path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        sent.append(body)
        await gate.wait()
        return 200, {}, json.dumps({"usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

    principal = Principal("k", "k", None, ())
    runner = BatchRunner(bstore, files, dispatch, lambda _k: principal, S)
    t = table()
    demand = OnDemand(SimpleNamespace(name="router-1"), S, lambda: t, asyncio.Event, lambda: None)  # type: ignore[arg-type]
    demand.backlog = runner.backlog.by_model
    task = asyncio.create_task(runner.run())
    runner.poke()
    # Two sent at once (batch_concurrency), four not: reported under the model the alias names.
    await turns(lambda: demand.report()["backlog"] == {"m": 4}, "a backlog of four")
    await turns(lambda: len(sent) == 2, "the two marked started reach dispatch")  # their tasks run next
    assert demand.report()["backlog"] == {"m": 4}  # and no more are sent while they run
    gate.set()
    await turns(lambda: bstore.get_batch("batch_1").status == "completed", "the batch done")  # type: ignore[union-attr]
    await turns(lambda: demand.report()["backlog"] == {}, "no backlog once it is done")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_backlog_for_a_model_the_table_does_not_know_is_not_reported() -> None:
    t = table()
    demand = OnDemand(SimpleNamespace(name="router-1"), dataclasses.replace(S), lambda: t, asyncio.Event,  # type: ignore[arg-type]
                      lambda: None)
    demand.backlog = lambda: {"gone": 5, "mm": 2, "m": 1}
    assert demand.report()["backlog"] == {"m": 3}
