"""LoRA adapters loaded at run time (docs/adapters.md, a model's `adapter_loading: runtime`).

Such a model's replicas start with no adapter loaded; each adapter's weights are on the host
(apply fetched them, and the state's replica record names the path: `LoadedAdapter.path`).
The router loads an adapter on first use and keeps at most the model's `max_loras` on each
replica:

- affinity: an adapter's requests go to the replicas that have it loaded (or are loading it),
  least loaded first; another replica loads it only when all of those are saturated (as many
  requests in flight as the replica's slots, admission.replica_slots);
- a load goes to the least-loaded replica that has room: fewer than `max_loras` adapters,
  or one whose least recently used adapter has no request in flight, which is unloaded first
  (never one with requests in flight);
- single flight: requests that find a load of their adapter under way wait for it; a load
  that fails answers each of them 503 with the engine's reason.

The choice, the reservation of the slot and the eviction of the victim happen in one step of
the event loop (`LoraBook.choose`), so concurrent requests never overfill a replica; the
engine calls come after. The book is this router process's: a router with several workers
has one per worker, so an engine may hold a few more adapters than `max_loras`, and an
engine's "already loaded" answer counts as a load. Only the path in the state is ever sent:
a request names an adapter, never where its weights are.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from llmgw.engines import find
from llmgw.router.openai_errors import RouterError
from llmgw.router.table import ModelEntry, ReplicaRuntime

log = logging.getLogger("llmgw.router.lora")

# vLLM's answer (400) when the name is loaded already: another router worker loaded it.
_ALREADY = "has already been loaded"


def runtime_path(replica: ReplicaRuntime, adapter: str) -> str | None:
    """Where `replica`'s host holds `adapter` for a load at run time; None: loaded at start."""
    for a in replica.record.adapters:
        if a.name == adapter:
            return a.path
    return None


@dataclass
class Held:
    """One adapter on one replica: its requests in flight, and when it was last used (monotonic)."""

    in_flight: int = 0
    last_used: float = 0.0
    loading: asyncio.Future[None] | None = None  # set while its load runs (requests wait on it)


@dataclass
class _Replica:
    endpoint: str
    adapters: dict[str, Held] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    """Where one request for an adapter goes: `replica`, its `held` counting the request; `load`
    when it must be loaded there first (after unloading `evict`, if set)."""

    replica: ReplicaRuntime
    adapter: str
    held: Held
    load: bool = False
    evict: str | None = None


class LoraBook:
    """Which adapters each replica holds (no I/O): the LRU, the affinity and the reservations."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._replicas: dict[str, _Replica] = {}

    def _of(self, replica: ReplicaRuntime) -> _Replica:
        book = self._replicas.get(replica.id)
        if book is None or book.endpoint != replica.endpoint:  # a new process: it holds nothing yet
            book = self._replicas[replica.id] = _Replica(replica.endpoint)
        return book

    def held(self, replica: ReplicaRuntime) -> dict[str, Held]:
        return self._of(replica).adapters

    def loaded(self, replica: ReplicaRuntime) -> list[str]:
        """The adapters `replica` holds (loads under way included), least recently used first."""
        items = sorted(self._of(replica).adapters.items(), key=lambda kv: kv[1].last_used)
        return [name for name, _ in items]

    def _victim(self, replica: ReplicaRuntime, max_loras: int) -> tuple[bool, str | None]:
        """(room, adapter to unload first): room when it holds fewer than `max_loras`, or its least
        recently used adapter without requests in flight (and not loading) can go."""
        adapters = self._of(replica).adapters
        if len(adapters) < max_loras:
            return True, None
        idle = [(h.last_used, name) for name, h in adapters.items() if h.in_flight == 0 and h.loading is None]
        return (True, min(idle)[1]) if idle else (False, None)

    def choose(self, candidates: list[ReplicaRuntime], adapter: str, max_loras: int,
               saturated: Callable[[ReplicaRuntime], bool]) -> Choice | None:
        """Pick a replica for one request and reserve it (the request's `Held` counts it in flight).
        None: every candidate holds `max_loras` adapters with requests in flight."""
        holding = [r for r in candidates if adapter in self._of(r).adapters]
        ready = [r for r in holding if not saturated(r)]
        if ready:
            return self._take(min(ready, key=lambda r: r.in_flight), adapter)
        roomy: list[tuple[ReplicaRuntime, str | None]] = []
        for r in candidates:
            if r in holding:
                continue
            room, victim = self._victim(r, max_loras)
            if room:
                roomy.append((r, victim))
        if roomy:
            r, victim = min(roomy, key=lambda rv: (rv[0].in_flight, rv[1] is not None))
            book = self._of(r)
            if victim is not None:
                del book.adapters[victim]  # gone for new requests now; the engine call comes after
            book.adapters[adapter] = Held(last_used=self.clock())
            return Choice(r, adapter, self._take(r, adapter).held, load=True, evict=victim)
        if holding:  # all saturated and nowhere to load it: the least loaded of them
            return self._take(min(holding, key=lambda r: r.in_flight), adapter)
        return None

    def _take(self, replica: ReplicaRuntime, adapter: str) -> Choice:
        held = self._of(replica).adapters[adapter]
        held.in_flight += 1
        held.last_used = self.clock()
        return Choice(replica, adapter, held)

    def release(self, held: Held) -> None:
        held.in_flight -= 1
        held.last_used = self.clock()

    def forget(self, replica: ReplicaRuntime, adapter: str, held: Held) -> None:
        """A load failed: the slot it reserved is free again (only if it is still that load's)."""
        adapters = self._of(replica).adapters
        if adapters.get(adapter) is held:
            del adapters[adapter]


# POST an engine's path with a JSON body: (HTTP status, body text); raises on no answer.
Poster = Callable[[ReplicaRuntime, str, dict[str, str]], Awaitable[tuple[int, str]]]
# Count an event (load | unload | load_failure | unload_failure) of an adapter.
Counter = Callable[[str, str], None]


class RuntimeLoras:
    """Loads and unloads adapters on replicas of `adapter_loading: runtime` models, for the proxy."""

    def __init__(self, post: Poster, count: Counter, book: LoraBook | None = None) -> None:
        self.post = post
        self.count = count
        self.book = book or LoraBook()
        self._tasks: set[asyncio.Task[None]] = set()  # loads under way (a reference keeps each alive)

    async def acquire(self, target: ModelEntry, candidates: list[ReplicaRuntime],
                      saturated: Callable[[ReplicaRuntime], bool]) -> Choice | None:
        """A replica holding `target` (an adapter) for one request, loading it there first when
        needed; None when there is no candidate. The caller `release`s the choice after."""
        assert target.adapter is not None and target.base is not None
        if not candidates:
            return None
        name = target.name
        max_loras = target.record.max_loras or 1
        choice = self.book.choose(candidates, name, max_loras, saturated)
        if choice is None:
            raise RouterError(503, f"no replica of {target.base!r} has room to load adapter {name!r}: each holds "
                                   f"{max_loras} adapters (its max_loras) with requests in flight; try again shortly",
                              code="adapter_unavailable", headers={"Retry-After": "1"})
        held = choice.held
        if choice.load:
            # Its own task: a client that goes away mid-load stops waiting, not the load others wait on.
            held.loading = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._load(choice, name, target.base, held.loading))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            if held.loading is not None:
                await asyncio.shield(held.loading)
        except BaseException:
            self.book.release(held)
            raise
        return choice

    def release(self, choice: Choice) -> None:
        self.book.release(choice.held)

    def lost(self, choice: Choice) -> None:
        """The engine answered 404 for the adapter: it does not hold it (restarted in place, or
        another worker unloaded it). Forgotten, so the next request loads it again."""
        log.warning("adapter %s: replica %s no longer holds it; it loads again on next use", choice.adapter,
                    choice.replica.id)
        self.book.forget(choice.replica, choice.adapter, choice.held)

    async def _load(self, choice: Choice, name: str, base: str, future: asyncio.Future[None]) -> None:
        """Load `name` on the choice's replica (unloading its victim first); settles `future`."""
        replica, held = choice.replica, choice.held
        try:
            if choice.evict is not None:
                await self._unload(replica, choice.evict)
            path = runtime_path(replica, name)
            if path is None:  # the state changed meanwhile: the replica no longer lists it
                raise _LoadFailed(f"replica {replica.id} has no path for adapter {name!r} in the state")
            api = find(replica.record.engine)
            if api is None or api.lora_api is None:
                raise _LoadFailed(f"replica {replica.id} runs {replica.record.engine}, which llmgw loads adapters "
                                  "into only at start")
            try:
                status, text = await self.post(replica, api.lora_api[0], {"lora_name": name, "lora_path": path})
            except (TimeoutError, OSError, RuntimeError) as exc:
                raise _LoadFailed(f"replica {replica.id} did not answer: {type(exc).__name__}: {exc}") from None
            if status != 200 and not (status == 400 and _ALREADY in text):
                raise _LoadFailed(f"replica {replica.id} answered {status}: {text[:300]}")
        except _LoadFailed as failed:
            self.count(name, "load_failure")
            log.warning("adapter %s (of %s): load failed: %s", name, base, failed.reason)
            self.book.forget(replica, name, held)
            held.loading = None
            future.set_exception(RouterError(503, f"adapter {name!r} could not be loaded: {failed.reason}",
                                             code="adapter_load_failed", headers={"Retry-After": "1"}))
            future.exception()  # retrieved: a failure nobody waits for any more is no "never retrieved" warning
            return
        self.count(name, "load")
        log.info("adapter %s (of %s): loaded on replica %s", name, base, replica.id)
        held.loading = None
        future.set_result(None)

    async def _unload(self, replica: ReplicaRuntime, name: str) -> None:
        """Unload the least recently used adapter (the book dropped it already); a failure is
        logged and counted, and the load goes ahead (the engine keeps it in its own cache)."""
        api = find(replica.record.engine)
        try:
            if api is None or api.lora_api is None:
                raise RuntimeError(f"{replica.record.engine} has no unload API")
            status, text = await self.post(replica, api.lora_api[1], {"lora_name": name})
        except (TimeoutError, OSError, RuntimeError) as exc:
            status, text = 0, f"{type(exc).__name__}: {exc}"
        if status == 200 or status == 404:  # 404: not there (restarted, or another worker unloaded it)
            self.count(name, "unload")
            log.info("adapter %s: unloaded from replica %s (least recently used)", name, replica.id)
        else:
            self.count(name, "unload_failure")
            log.warning("adapter %s: unload from replica %s failed (%s): %s", name, replica.id, status, text[:300])


class _LoadFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
