"""On-demand models (scaling.min 0): start a replica when a request needs one, stop it when idle.

The router does not know how replicas are started; it takes an `Activator` from
outside. The real one runs apply's activation playbook through the runner wrapper
(it lives with apply); tests hand in their own. Without one (`None`), a request for
an on-demand model that has no replica running is answered 503 with a message that
says so.

The contract: `activate(model)` returns once it has started a replica of `model` and
recorded it `ready` in the state file (or raises); the router then waits — bounded by
`activation_timeout` — until its reloaded state shows a routable replica, holding the
request meanwhile. Concurrent requests for the same model share one activation.
`deactivate(replica_id)` stops a replica and removes it from the state; the router calls
it once the model has had no request for its `idle_timeout` (0 = never stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from llmgw.router.openai_errors import RouterError
from llmgw.router.settings import RouterSettings
from llmgw.router.table import ModelEntry, RoutingTable

log = logging.getLogger("llmgw.router")


class Activator(Protocol):
    """Starts and stops on-demand replicas for the router."""

    async def activate(self, model: str) -> None:
        """Start a replica of `model`; return once the state file records it `ready`."""

    async def deactivate(self, replica_id: str) -> None:
        """Stop the replica and remove it from the state file."""


class OnDemand:
    def __init__(self, activator: Activator | None, settings: RouterSettings,
                 table: Callable[[], RoutingTable], changed: Callable[[], asyncio.Event],
                 poke_state: Callable[[], None]) -> None:
        self.activator = activator
        self.settings = settings
        self.table = table
        self.changed = changed
        self.poke_state = poke_state
        self.activating: dict[str, asyncio.Task[None]] = {}
        self.deactivating: set[str] = set()
        self.last_request: dict[str, float] = {}  # model -> monotonic time of the last request
        self._tasks: set[asyncio.Task[None]] = set()

    def touch(self, model: str) -> None:
        self.last_request[model] = time.monotonic()

    def _unavailable(self, message: str) -> RouterError:
        return RouterError(503, message, code="model_not_running",
                           headers={"Retry-After": str(self.settings.retry_after)})

    async def ensure(self, model: str) -> None:
        """Hold until `model` has a routable replica, starting one if needed."""
        if self.activator is None:
            raise self._unavailable(
                f"model {model!r} is started on demand and has no replica running, and this router "
                "has no activator to start one: scale it up (min >= 1) and apply, or run the router "
                "with on-demand activation")
        self.touch(model)
        task = self.activating.get(model)
        if task is None:
            task = asyncio.create_task(self._activate(model), name=f"activate {model}")
            self.activating[model] = task
        deadline = time.monotonic() + self.settings.activation_timeout
        while True:
            entry = self.table().models.get(model)
            now = time.monotonic()
            if entry is not None and entry.routable(now):
                return
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise self._unavailable(f"could not start model {model!r}: {task.exception()}")
            if now >= deadline:
                raise self._unavailable(f"model {model!r} did not become ready within "
                                        f"{self.settings.activation_timeout:g} s of being started")
            event = self.changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), min(0.5, deadline - now))

    async def _activate(self, model: str) -> None:
        log.info("starting on-demand model %s", model)
        try:
            assert self.activator is not None
            await self.activator.activate(model)
            self.poke_state()
        except Exception as exc:
            log.error("starting on-demand model %s failed: %s", model, exc)
            raise
        finally:
            # Keep a failed activation visible to its waiters for a moment, then allow a retry.
            asyncio.get_running_loop().call_later(1.0, self._forget, model)

    def _forget(self, model: str) -> None:
        task = self.activating.get(model)
        if task is not None and task.done():
            del self.activating[model]
            if not task.cancelled():
                task.exception()  # mark retrieved

    async def run_idle(self) -> None:
        while True:
            await asyncio.sleep(self.settings.idle_check_interval)
            self.stop_idle()

    def idle_replicas(self, entry: ModelEntry, now: float) -> list[str]:
        """Replica ids of an on-demand model that has been idle for its idle_timeout."""
        idle = entry.record.scaling.idle_timeout
        if not entry.on_demand or idle <= 0 or not entry.replicas or entry.name in self.activating:
            return []
        if any(r.in_flight for r in entry.replicas):
            return []
        last = max([self.last_request.get(entry.name, 0.0)] + [r.last_active for r in entry.replicas])
        if now - last < idle:
            return []
        return [r.id for r in entry.replicas if r.id not in self.deactivating]

    def stop_idle(self) -> None:
        if self.activator is None:
            return
        now = time.monotonic()
        table = self.table()
        self.deactivating &= set(table.replicas)
        for entry in table.models.values():
            for rid in self.idle_replicas(entry, now):
                self.deactivating.add(rid)
                t = asyncio.create_task(self._deactivate(entry.name, rid), name=f"deactivate {rid}")
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)

    async def _deactivate(self, model: str, replica_id: str) -> None:
        log.info("stopping idle on-demand replica %s of %s", replica_id, model)
        try:
            assert self.activator is not None
            await self.activator.deactivate(replica_id)
            self.poke_state()
        except Exception as exc:
            log.error("stopping replica %s failed (will retry): %s", replica_id, exc)
            self.deactivating.discard(replica_id)

    async def close(self) -> None:
        for t in [*self.activating.values(), *self._tasks]:
            t.cancel()
        await asyncio.gather(*self.activating.values(), *self._tasks, return_exceptions=True)
