"""Active health checks: GET <endpoint>/health on every replica, all at once, on a timer.

Passive marking happens where requests fail (the proxy counts failures, table.py
ejects); this loop is what brings a replica back: a passing check clears its failures
and ejection. A replica is routed to on the state file's word (`ready`: apply saw it
healthy) until a check or requests say otherwise; its health reads `unknown` until the
first check.

A check tells three answers apart, because a saturated engine is alive:

- ok: 200;
- busy: the engine is there but saturated — it accepted the connection and did not
  answer within `health_timeout`, or it answered 429, or 503 saying no slot is free
  (llama.cpp's `/health?fail_on_no_slot`). Still routed to; counts against nothing;
- down: the connection is refused or cannot be made, or any other answer (503 while
  the model loads, 500...). One down check ejects the replica (bounded by the model's
  share of ejected replicas, table.py).

Checks use a new connection each time, never a pooled one: a pooled connection the
engine has just closed would read as `down`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Literal

import aiohttp

from llmgw.router.settings import RouterSettings
from llmgw.router.table import EjectionPolicy, ReplicaRuntime, RoutingTable

log = logging.getLogger("llmgw.router")

Verdict = Literal["ok", "busy", "down"]


def classify(status: int, body: bytes) -> Verdict:
    """What an engine's /health answer means."""
    if status == 200:
        return "ok"
    if status == 429 or (status == 503 and b"no slot" in body.lower()):
        return "busy"
    return "down"


class HealthChecker:
    def __init__(self, session: aiohttp.ClientSession, table: Callable[[], RoutingTable],
                 settings: RouterSettings, on_change: Callable[[], None]) -> None:
        self.session = session  # kept for callers that hand one in; checks use their own
        self.table = table
        self.settings = settings
        self.on_change = on_change
        self.policy = EjectionPolicy(threshold=settings.eject_after_failures, max_share=settings.max_ejected_share,
                                     base=settings.backoff_base, cap=settings.backoff_max)
        self._own: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._own is None or self._own.closed:
            t = self.settings.health_timeout
            self._own = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=0),
                # Connect and read limits apart: a connect that times out is down, a read busy.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=t, sock_read=t),
                auto_decompress=False, skip_auto_headers=("User-Agent",))
        return self._own

    async def close(self) -> None:
        if self._own is not None:
            await self._own.close()
            self._own = None

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.settings.health_interval)
                await self.check_all()
        finally:
            with contextlib.suppress(Exception):
                await self.close()

    async def check_all(self) -> None:
        replicas = list(self.table().replicas.values())
        if replicas:
            await asyncio.gather(*(self.check(r) for r in replicas))

    async def probe(self, endpoint: str) -> tuple[Verdict, str]:
        """One check of one engine: the verdict, and why in words."""
        try:
            async with self._client().get(endpoint + "/health") as resp:
                body = await resp.read()
                verdict = classify(resp.status, body)
                return verdict, f"health check answered {resp.status}"
        except aiohttp.ConnectionTimeoutError as exc:
            return "down", f"health check failed: {type(exc).__name__}: {exc}".rstrip(": ")
        except (aiohttp.SocketTimeoutError, TimeoutError):
            return "busy", f"health check got no answer within {self.settings.health_timeout:g} s"
        except (aiohttp.ClientError, OSError) as exc:
            return "down", f"health check failed: {type(exc).__name__}: {exc}".rstrip(": ")

    async def check(self, replica: ReplicaRuntime) -> None:
        before = replica.health
        verdict, why = await self.probe(replica.endpoint)
        if verdict == "ok":
            replica.mark_healthy()
        elif verdict == "busy":
            replica.mark_busy()
        else:
            entry = self.table().models.get(replica.model)
            replica.health = "unhealthy"
            if entry is not None:
                entry.failed(replica, why, self.policy, decisive=True)
            else:
                replica.note_failure(why)
        if replica.health != before:
            log.info("replica %s is %s (%s)", replica.id, replica.health, "ok" if verdict == "ok" else why)
            self.on_change()
