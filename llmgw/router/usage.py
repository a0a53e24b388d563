"""Usage accounting: counted in memory per request, written to the store in batches.

A request adds to two small dicts (requests per key and minute; requests and tokens
per key, day and model). Once a second the loop swaps them out, writes them in one
transaction from a worker thread, then reads back the store's totals for today and
the last two minutes, so each group's quota sees every router's counts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from llmgw.router.auth import KeyCache
from llmgw.store import MinuteCount, Store, UsageDelta, UsageRow

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

    def take(self) -> tuple[list[UsageDelta], list[MinuteCount]]:
        usage, self.usage = self.usage, {}
        minutes, self.minutes = self.minutes, {}
        return ([UsageDelta(k, d, m, v[0], v[1], v[2]) for (k, d, m), v in usage.items()],
                [MinuteCount(k, m, n) for (k, m), n in minutes.items()])

    def restore(self, deltas: list[UsageDelta], minutes: list[MinuteCount]) -> None:
        for d in deltas:
            row = self.usage.setdefault((d.key_id, d.day, d.model), [0, 0, 0])
            row[0] += d.requests
            row[1] += d.prompt_tokens
            row[2] += d.completion_tokens
        for m in minutes:
            self.minutes[(m.key_id, m.minute)] = self.minutes.get((m.key_id, m.minute), 0) + m.requests


class UsageSync:
    """The loop that writes usage and brings the shared quota counters up to date."""

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
        now = time.time()
        day = self.clock.day(now)
        minute = int(now // 60)
        deltas, minutes = self.recorder.take()
        quotas = list(self.keys.quotas.values())
        for q in quotas:
            q.begin_flush()
        try:
            rows, counts = await asyncio.to_thread(self._exchange, deltas, minutes, day, minute - 1)
        except Exception as exc:  # keep counting in memory; write it all next time
            self.recorder.restore(deltas, minutes)
            for q in quotas:
                q.abort_flush()
            if self.last_error is None:
                log.warning("usage write to the store failed (will retry): %s", exc)
            self.last_error = str(exc)
            return
        self.last_error = None
        self._apply(rows, counts, day, minute)

    def _exchange(self, deltas: list[UsageDelta], minutes: list[MinuteCount], day: str,
                  since: int) -> tuple[list[UsageRow], list[MinuteCount]]:
        self.store.add_usage(deltas, minutes)
        return self.store.usage(day), self.store.minute_requests(since)

    def _apply(self, rows: list[UsageRow], counts: list[MinuteCount], day: str, minute: int) -> None:
        tokens: dict[str, int] = defaultdict(int)
        per_minute: dict[str, dict[int, int]] = defaultdict(dict)
        groups_of: dict[str | None, list[str]] = {}

        def ancestry(key_id: str) -> list[str]:
            g = self.keys.key_groups.get(key_id)
            if g not in groups_of:
                groups_of[g] = self.keys.ancestry(g)
            return groups_of[g]

        for r in rows:
            for g in ancestry(r.key_id):
                tokens[g] += r.total_tokens
        for c in counts:
            for g in ancestry(c.key_id):
                per_minute[g][c.minute] = per_minute[g].get(c.minute, 0) + c.requests
        for name, q in self.keys.quotas.items():
            q.end_flush(per_minute.get(name, {}), day, tokens.get(name, 0), minute)
