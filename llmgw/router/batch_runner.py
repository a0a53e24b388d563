"""Running batches: each request of a batch sent through the router's own proxy, once.

A router looks for batches to run every `batch_poll_interval` seconds (at once after a
batch is created here) and takes the lease of at most `batch_max_running` of them
(store/batches.py). For each it:

1. marks the requests an earlier holder started but never recorded as failed, with an
   error line (`request_interrupted`): that router died between sending and recording,
   so the engine may or may not have run them, and sending them again could run them
   twice. A failed line is the honest answer; the client may resubmit those custom_ids;
2. sends the pending requests in line order, at most `batch_concurrency` at a time per
   router, each marked `started` in the store first (only while the lease is still this
   router's), through `dispatch`: the proxy itself, as if the batch's key had sent it, so
   quotas, usage, routing, retries and metrics are the interactive path's own;
3. a request the router refused before any engine saw it (a rate limit, no replica
   ready, the store briefly down) goes back to pending until its Retry-After; anything
   else the engine answered is recorded: 2xx in the output file, the rest in the error file;
4. renews the lease every third of `batch_lease_ttl`; a lost lease stops it sending;
   a router told to stop (SIGTERM) sends nothing more and waits up to `batch_lease_ttl`
   for what is in flight, so a routine restart interrupts no request;
5. ends the batch: `completed` when nothing is pending, `cancelled` after a cancel (what
   had not started is not sent), `expired` past its completion window (what had not
   started is an error line `batch_expired`), writing the output and error files.

Priority: every request goes to the proxy at `batch` priority (batch_dispatch.py), for
the router's admission (admission.py) to serve after interactive traffic, and to shed
first; a shed request is sent again after its Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

from llmgw.router.batch_backlog import Backlog
from llmgw.router.batch_dispatch import Dispatch
from llmgw.router.batch_files import FileDir
from llmgw.router.principal import Principal
from llmgw.router.settings import RouterSettings
from llmgw.store.batches import BatchLine, BatchRecord, BatchStore, FileRecord

log = logging.getLogger("llmgw.router")

# Router refusals that mean no engine saw the request: sent again after Retry-After.
# (server_overloaded, queue_timeout: admission's shedding and queue bound.)
_RETRY_CODES = frozenset({"rate_limit_exceeded", "no_replica_available", "quota_unavailable",
                          "server_overloaded", "queue_timeout"})
_RETRY_STATUS = frozenset({429, 503})
_MAX_RETRY_WAIT = 60.0

def _line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> str:
    """One line of an output or error file, in OpenAI's shape."""
    return json.dumps({"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": custom_id, "response": response,
                       "error": error}, separators=(",", ":"))


def error_line(custom_id: str, code: str, message: str) -> str:
    return _line(custom_id, None, {"code": code, "message": message})


ORPHANED = ("request_interrupted", "the router running this batch stopped after sending this request and before "
                                   "recording its answer; it is not sent again, so that it cannot run twice")


def _tokens(body: Any) -> tuple[int, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (p if isinstance(p, int) else 0), (c if isinstance(c, int) else 0)


def retry_wait(status: int, headers: dict[str, str], body: Any) -> float | None:
    """Seconds to wait before sending again, when the router refused the request before an
    engine saw it; None when the answer is final."""
    if status not in _RETRY_STATUS:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if code not in _RETRY_CODES:
        return None
    try:
        wait = float(headers.get("retry-after", "1"))
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.1), _MAX_RETRY_WAIT)


class BatchRunner:
    """The loop that claims batches from the store and runs them."""

    def __init__(self, store: BatchStore, files: FileDir, dispatch: Dispatch,
                 principal_of: Callable[[str], Principal | None], settings: RouterSettings) -> None:
        self.store = store
        self.files = files
        self.dispatch = dispatch
        self.principal_of = principal_of
        self.settings = settings
        self.runner_id = f"router-{uuid.uuid4().hex[:12]}"
        self.slots = asyncio.Semaphore(settings.batch_concurrency)
        self.running: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self.stopping = False
        self.backlog = Backlog()  # what these batches have not sent yet: load for demand scaling

    def poke(self) -> None:
        """A batch was created or cancelled here: look now, not at the next poll."""
        self._wake.set()

    def stop_sending(self) -> None:
        """A stop was asked (SIGTERM): start no more requests from now on, while the listeners
        close; what is in flight carries on, for drain() to wait for."""
        self.stopping = True

    async def drain(self, timeout: float) -> None:
        """Stopping: send nothing more, and give the requests in flight up to `timeout`
        seconds to be answered and recorded, so a routine restart fails none."""
        self.stop_sending()
        if self.running:
            await asyncio.wait(list(self.running.values()), timeout=timeout)

    async def run(self) -> None:
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.batch_poll_interval)
                self._wake.clear()
                try:
                    await self.claim_more()
                except Exception as exc:  # the store may be down a while: try again next poll
                    log.warning("batches: cannot look for batches to run: %s", exc)
        finally:
            tasks = list(self.running.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def claim_more(self) -> None:
        while not self.stopping and len(self.running) < self.settings.batch_max_running:
            batch = await asyncio.to_thread(self.store.claim, self.runner_id, time.time(),
                                            self.settings.batch_lease_ttl, tuple(self.running))
            if batch is None:
                return
            log.info("batches: running %s (%d requests, %d done before)", batch.id, batch.total,
                     batch.completed + batch.failed)
            self.running[batch.id] = asyncio.create_task(self._run_batch(batch), name=f"llmgw-batch-{batch.id}")

    async def _run_batch(self, batch: BatchRecord) -> None:
        renewing = asyncio.create_task(self._renew(batch.id))
        try:
            await self._drive(batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batches: running %s failed; another poll will take it up again", batch.id)
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            self.running.pop(batch.id, None)
            self.backlog.forget(batch.id)  # done, or another router's now: no longer this one's backlog
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.release, batch.id, self.runner_id)

    async def _renew(self, batch_id: str) -> None:
        ttl = self.settings.batch_lease_ttl
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                kept = await asyncio.to_thread(self.store.renew, batch_id, self.runner_id, time.time(), ttl)
            except Exception as exc:
                log.warning("batches: cannot renew the lease of %s: %s", batch_id, exc)
                continue
            if not kept:
                log.warning("batches: lost the lease of %s; another router runs it now", batch_id)
                task = self.running.get(batch_id)
                if task is not None:
                    task.cancel()
                return

    async def _drive(self, batch: BatchRecord) -> None:
        store, me = self.store, self.runner_id
        orphans = await asyncio.to_thread(store.orphans, batch.id)
        if orphans:
            log.warning("batches: %s: %d requests were sent by a router that stopped before recording them; "
                        "marked failed, not sent again", batch.id, len(orphans))
            await asyncio.to_thread(store.finish, batch.id,
                                    [(o.line, False, error_line(o.custom_id, *ORPHANED), 0, 0) for o in orphans])
        if batch.status == "validating":
            await asyncio.to_thread(store.set_status, batch.id, me, "in_progress", int(time.time()),
                                    only_from="validating")
        principal = self.principal_of(batch.key_id)
        inflight: set[asyncio.Task[None]] = set()
        ending: str | None = None
        while True:
            now = time.time()
            current = await asyncio.to_thread(store.get_batch, batch.id)
            if current is None:
                return
            if current.status == "cancelling":
                ending = "cancelled"
            elif current.status == "finalizing":
                ending = "completed"
            elif now >= current.expires_at:
                ending = "expired"
            elif principal is None:
                principal = self.principal_of(batch.key_id)
            if self.stopping:
                if not inflight:
                    return  # the lease goes back; the next router carries on from the store
            elif ending is None:
                free = self.settings.batch_concurrency - len(inflight)
                todo = await asyncio.to_thread(store.pending, batch.id, now, free) if free > 0 else []
                if principal is None and todo:  # the key was revoked (or deleted): nothing can be sent for it
                    await asyncio.to_thread(store.finish, batch.id, [
                        (t.line, False, error_line(t.custom_id, "key_revoked", "the API key that created this "
                                                   "batch is no longer active"), 0, 0) for t in todo],
                        from_state="pending")
                    continue
                for t in todo:
                    assert principal is not None
                    # The router's slot first: a line is marked started only when it is sent at once.
                    await self.slots.acquire()
                    if self.stopping:  # asked to stop while this waited for a slot: the line stays pending
                        self.slots.release()
                        break
                    if not await asyncio.to_thread(store.start, batch.id, t.line, me, time.time()):
                        self.slots.release()
                        log.warning("batches: %s: cannot mark line %d started (lease lost or batch stopped)",
                                    batch.id, t.line)
                        break
                    task = asyncio.create_task(self._send(batch, principal, t))
                    task.add_done_callback(lambda _: self.slots.release())
                    inflight.add(task)
                    task.add_done_callback(inflight.discard)
                if self.backlog.due(batch.id, time.monotonic()):
                    self.backlog.note(batch, await asyncio.to_thread(store.pending_count, batch.id))
                if not todo and not inflight and await asyncio.to_thread(store.pending_count, batch.id) == 0:
                    ending = "completed"
            if ending is not None and not inflight:
                await self._end(current, ending)
                return
            if inflight:
                await asyncio.wait(inflight, timeout=self.settings.batch_poll_interval,
                                   return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(self.settings.batch_poll_interval)  # waiting out a Retry-After

    async def _send(self, batch: BatchRecord, principal: Principal, t: BatchLine) -> None:
        store = self.store
        try:
            raw = await asyncio.to_thread(self.files.read, batch.input_file_id, t.start, t.length)
            body = json.loads(raw)["body"]
            status, headers, answer = await self.dispatch(principal, batch.endpoint, json.dumps(body).encode())
        except asyncio.CancelledError:
            raise  # stopping: the line stays `started`, and the next holder marks it failed
        except Exception as exc:
            log.warning("batches: %s line %d: %s", batch.id, t.line, exc)
            await asyncio.to_thread(store.finish, batch.id, [
                (t.line, False, error_line(t.custom_id, "internal_error", f"the router could not send this "
                                                                          f"request: {type(exc).__name__}"), 0, 0)])
            return
        try:
            parsed: Any = json.loads(answer)
        except ValueError:
            parsed = answer.decode("utf-8", "replace")
        wait = retry_wait(status, headers, parsed)
        if wait is not None:
            await asyncio.to_thread(store.unstart, batch.id, t.line, time.time() + wait)
            return
        ok = 200 <= status < 300
        response = {"status_code": status, "request_id": f"req_{secrets.token_hex(12)}", "body": parsed}
        tin, tout = _tokens(parsed) if ok else (0, 0)
        await asyncio.to_thread(store.finish, batch.id, [(t.line, ok, _line(t.custom_id, response, None), tin, tout)])

    async def _end(self, batch: BatchRecord, status: str) -> None:
        store, me = self.store, self.runner_id
        now = int(time.time())
        if status == "expired":
            left = await asyncio.to_thread(store.pending, batch.id, float("inf"), 1_000_000)
            await asyncio.to_thread(store.finish, batch.id, [
                (t.line, False, error_line(t.custom_id, "batch_expired", "this request could not be executed "
                                           "before the completion window expired"), 0, 0) for t in left],
                from_state="pending")
        if status == "completed":  # (a cancelled or expired batch goes straight to its end)
            await asyncio.to_thread(store.set_status, batch.id, me, "finalizing", now, only_from="in_progress")
        files: list[FileRecord] = []
        ids: dict[str, str | None] = {"done": None, "failed": None}
        for state, name in (("done", "output"), ("failed", "error")):
            lines = await asyncio.to_thread(store.results, batch.id, state)
            if not lines:
                continue
            file_id = f"file-{secrets.token_hex(12)}"
            size = await asyncio.to_thread(self.files.write, file_id, lines)
            files.append(FileRecord(file_id, batch.owner, "batch_output", f"{batch.id}_{name}.jsonl", size, now))
            ids[state] = file_id
        if await asyncio.to_thread(store.complete, batch.id, me, status, int(time.time()), files,
                                   ids["done"], ids["failed"]):
            log.info("batches: %s %s", batch.id, status)
        else:  # the lease went elsewhere meanwhile: that router writes the files again
            for f in files:
                with contextlib.suppress(OSError):
                    self.files.path(f.id).unlink()
