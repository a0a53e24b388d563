"""How many requests each replica's engine serves at once, asked of the engine itself.

Admission (admission.py) holds requests beyond a model's slots in the router; its
default for a replica is what the engine says it runs, not what llmgw guesses: an
operator may start llama.cpp with any `--parallel` (the engine role's
`llmgw_engine_llamacpp_parallel`). llama-server reports it as `total_slots` in `GET /props`.
Other engines (vLLM, SGLang) report no such number: apply records what their command line
makes them run (the state's `max_running`, llmgw.engines.max_running), which admission reads
when no engine answered here.

Asked with the health checks (health.py): every `health_interval`, the first one after
that long, until the engine answers, then once per replica endpoint (a new endpoint is
a new process: asked again); an engine that never answers keeps no router limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aiohttp

from llmgw.router.engine_keys import EngineKeys
from llmgw.router.settings import RouterSettings
from llmgw.router.table import RoutingTable

log = logging.getLogger("llmgw.router")

_ASKS = {"llamacpp": "/props"}  # the engines that say, and where
_MAX_SLOTS = 65536  # more is not an answer to believe


class SlotCounts:
    """replica id -> (endpoint it was learnt from, slots)."""

    def __init__(self, settings: RouterSettings, table: Callable[[], RoutingTable], engine_keys: EngineKeys) -> None:
        self.settings = settings
        self.table = table
        self.engine_keys = engine_keys
        self.known: dict[str, tuple[str, int]] = {}

    def slots(self, replica_id: str, endpoint: str) -> int | None:
        """What the engine at `endpoint` said, if it did."""
        got = self.known.get(replica_id)
        return got[1] if got is not None and got[0] == endpoint else None

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.health_timeout)
        async with aiohttp.ClientSession(timeout=timeout, skip_auto_headers=("User-Agent",)) as session:
            while True:
                await asyncio.sleep(self.settings.health_interval)
                await self.ask_all(session)

    async def ask_all(self, session: aiohttp.ClientSession) -> None:
        replicas = self.table().replicas
        for gone in set(self.known) - set(replicas):
            del self.known[gone]
        todo = [r for r in replicas.values()
                if r.record.engine in _ASKS and r.state != "draining" and self.slots(r.id, r.endpoint) is None]
        await asyncio.gather(*(self._ask(session, r.id, r.endpoint, _ASKS[r.record.engine]) for r in todo))

    async def _ask(self, session: aiohttp.ClientSession, replica_id: str, endpoint: str, path: str) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
            headers = self.engine_keys.authorize(replica_id, {})
            async with session.get(endpoint + path, headers=headers) as resp:
                if resp.status != 200:
                    return
                body = await resp.json(content_type=None)
            n = body.get("total_slots") if isinstance(body, dict) else None
            if type(n) is int and 1 <= n <= _MAX_SLOTS:
                self.known[replica_id] = (endpoint, n)
                log.info("replica %s serves %d requests at once (its engine's slots)", replica_id, n)
