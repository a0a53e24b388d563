"""Usage accounting: counted in memory per request, written to the store in batches.

A request adds to two small dicts (requests per key and minute; requests and tokens
per key, day and model). Once a second the loop swaps them out and writes them in one
transaction from a worker thread, together with the token reservations of the requests
they settle (quotas.py). Requests of keys under a limit are counted in their minute by
the store at admission, so they are not counted here again.

On SIGTERM the router writes what is left before it exits (app.py `Router.stop`);
killed outright, it loses at most one flush interval of counts.
"""

from __future__ import annotations

import asyncio
import logging
import time

from llmgw.router.auth import KeyCache
from llmgw.store import MinuteCount, Store, UsageDelta

log = logging.getLogger("llmgw.router")


class Clock:
    """UTC day strings without a strftime per request."""

    def __init__(self) -> None:
        self._day_index = -1
        self._day = ""

    def day(self, now: float) -> str:
        index = int(now // 86400)
        if index != self._day_index:
            self._day_index = index
            self._day = time.strftime("%Y-%m-%d", time.gmtime(index * 86400))
        return self._day


class UsageRecorder:
    def __init__(self) -> None:
        self.usage: dict[tuple[str, str, str], list[int]] = {}
        self.minutes: dict[tuple[str, int], int] = {}
        self.released: list[str] = []  # reservations whose requests are done

    def release(self, reservation_id: str) -> None:
        self.released.append(reservation_id)

    def count_request(self, key_id: str, minute: int) -> None:
        k = (key_id, minute)
        self.minutes[k] = self.minutes.get(k, 0) + 1

    def add(self, key_id: str, day: str, model: str, prompt: int, completion: int) -> None:
        k = (key_id, day, model)
        row = self.usage.get(k)
        if row is None:
            self.usage[k] = [1, prompt, completion]
        else:
            row[0] += 1
            row[1] += prompt
            row[2] += completion

    def take(self) -> tuple[list[UsageDelta], list[MinuteCount], list[str]]:
        usage, self.usage = self.usage, {}
        minutes, self.minutes = self.minutes, {}
        released, self.released = self.released, []
        return ([UsageDelta(k, d, m, v[0], v[1], v[2]) for (k, d, m), v in usage.items()],
                [MinuteCount(k, m, n) for (k, m), n in minutes.items()], released)

    def restore(self, deltas: list[UsageDelta], minutes: list[MinuteCount], released: list[str]) -> None:
        self.released[:0] = released
        for d in deltas:
            row = self.usage.setdefault((d.key_id, d.day, d.model), [0, 0, 0])
            row[0] += d.requests
            row[1] += d.prompt_tokens
            row[2] += d.completion_tokens
        for m in minutes:
            self.minutes[(m.key_id, m.minute)] = self.minutes.get((m.key_id, m.minute), 0) + m.requests


class UsageSync:
    """The loop that writes usage and settles reservations."""

    def __init__(self, store: Store, keys: KeyCache, recorder: UsageRecorder, clock: Clock,
                 interval: float = 1.0) -> None:
        self.store = store
        self.keys = keys
        self.recorder = recorder
        self.clock = clock
        self.interval = interval
        self.last_error: str | None = None
        self._lock = asyncio.Lock()  # the loop and an admin read may both ask for a sync

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sync()

    async def sync(self) -> None:
        async with self._lock:
            await self._sync()

    async def _sync(self) -> None:
        deltas, minutes, released = self.recorder.take()
        try:
            await asyncio.to_thread(self.store.add_usage, deltas, minutes, released, now=time.time())
        except Exception as exc:  # keep counting in memory; write it all next time
            self.recorder.restore(deltas, minutes, released)
            if self.last_error is None:
                log.warning("usage write to the store failed (will retry): %s", exc)
            self.last_error = str(exc)
            return
        self.last_error = None
