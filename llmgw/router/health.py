"""Active health checks: GET <endpoint>/health on every replica, all at once, on a timer.

Passive marking happens where requests fail (the proxy calls `mark_failure`); this
loop is what brings a replica back: a passing check clears its failures and backoff.
A replica is routed to on the state file's word (`ready`: apply saw it healthy) until a
check or a request says otherwise; its health reads `unknown` until the first check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp

from llmgw.router.settings import RouterSettings
from llmgw.router.table import ReplicaRuntime, RoutingTable

log = logging.getLogger("llmgw.router")


class HealthChecker:
    def __init__(self, session: aiohttp.ClientSession, table: Callable[[], RoutingTable],
                 settings: RouterSettings, on_change: Callable[[], None]) -> None:
        self.session = session
        self.table = table
        self.settings = settings
        self.on_change = on_change

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval)
            await self.check_all()

    async def check_all(self) -> None:
        replicas = list(self.table().replicas.values())
        if replicas:
            await asyncio.gather(*(self.check(r) for r in replicas))

    async def check(self, replica: ReplicaRuntime) -> None:
        before = replica.health
        timeout = aiohttp.ClientTimeout(total=self.settings.health_timeout)
        try:
            async with self.session.get(replica.endpoint + "/health", timeout=timeout) as resp:
                await resp.read()
                ok = resp.status == 200
                why = f"health check answered {resp.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            ok = False
            why = f"health check failed: {type(exc).__name__}: {exc}".rstrip(": ")
        if ok:
            replica.mark_healthy()
        elif replica.health != "unhealthy" or time.monotonic() >= replica.backoff_until:
            replica.mark_failure(why, base=self.settings.backoff_base, cap=self.settings.backoff_max)
        if replica.health != before:
            log.info("replica %s is %s (%s)", replica.id, replica.health, "ok" if ok else why)
            self.on_change()
