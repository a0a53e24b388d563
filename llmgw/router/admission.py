"""Admission per model: requests beyond the replicas' slots wait here, not on the engines.

Each ready replica has a concurrency target (`replica_slots`): its catalog profile's
`max_in_flight` (carried in the state's model record), else the router setting
`max_in_flight` when set, else the slots its engine says it runs (slots.py: llama.cpp's
`--parallel`, from its /props), else what apply recorded its engine runs (the state's
`max_running`: vLLM's `--max-num-seqs` or the pinned version's default for the device, SGLang's
`--max-running-requests`; llmgw.engines.max_running), else none (the engine's own queue
decides, as before). A model's
capacity is the sum over its routable replicas; with several worker processes each worker
admits up to its part of it (the kernel spreads connections across workers evenly).

Above capacity a request waits in the scheduler (scheduler.py: priority classes, then
weighted fair share of tokens between key groups, then arrival order), at most
`queue_timeout` seconds and behind at most `max_queue` others; past either it is refused
with an OpenAI-shaped error and `Retry-After` (429 when the queue is full — the lowest
class is shed first —, 503 when its wait ran out).

The interface, used by proxy.py for every generating request and by the Batch API:

    async with admission.slot(model, tenancy, priority, cost) as slot:
        ...                        # send the request to a replica
        slot.charge(tokens)        # the engine's prompt+completion count, when known

`model` is the routing table's model name (after aliases); `tenancy` the caller's
(principal.py: group, share, priority); `priority` None for the group's own; `cost` the
estimated tokens (charged when the request starts, corrected by `charge`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from llmgw.router.endpoints import Endpoint
from llmgw.router.metrics import RouterMetrics
from llmgw.router.openai_errors import RouterError
from llmgw.router.principal import Tenancy
from llmgw.router.scheduler import RANK, Scheduler, Ticket
from llmgw.router.settings import RouterSettings
from llmgw.router.slots import SlotCounts
from llmgw.router.table import ReplicaRuntime, RoutingTable
from llmgw.state import ModelRecord
from llmgw.store.model import PRIORITIES, Priority

# Endpoints that take none of an engine's slots: the tokenizer, and a stored response's
# retrieval or cancel (a cancel must never wait behind the queue it would shorten).
_NO_SLOT = frozenset({"POST /v1/tokenize", "POST /v1/detokenize"})


def takes_slot(endpoint: Endpoint) -> bool:
    """Does a request to `endpoint` occupy one of the engine's slots (so admission counts it)?"""
    return not endpoint.by_response_id and endpoint.key not in _NO_SLOT


# The error codes of admission's refusals (full queue, wait ran out), as the proxy counts them.
ADMISSION_CODES = frozenset({"server_overloaded", "queue_timeout"})

# A request's header that asks for a priority class (only as far as its group allows).
PRIORITY_HEADER = b"x-llmgw-priority"
# OpenAI's `service_tier` values, as classes: flex is OpenAI's slower, cheaper tier.
_SERVICE_TIERS: dict[str, Priority | None] = {"auto": None, "default": None, "flex": "batch",
                                               "priority": "interactive", "scale": "interactive"}


def replica_slots(replica: ReplicaRuntime, settings: RouterSettings, counts: SlotCounts | None,
                  record: ModelRecord | None = None) -> int:
    """How many requests one replica should hold at once; 0: no router limit. Its profile's
    `max_in_flight` (the catalog's, in the model's `record`) first, then the router's, then
    the engine's slots (as it says them, else as apply recorded them)."""
    by_profile = record.max_in_flight.get(replica.record.profile) if record is not None else None
    if by_profile is not None:
        return by_profile
    if settings.max_in_flight > 0:
        return settings.max_in_flight
    learnt = counts.slots(replica.id, replica.endpoint) if counts is not None else None
    return learnt or replica.record.max_running or 0


def requested_priority(tenancy: Tenancy, header: bytes | None, service_tier: object) -> Priority:
    """The class a request runs at: its group's, or the one it asks for by header or
    `service_tier` — lower always, higher only when the group allows it (a 403 says so)."""
    asked: Priority | None = None
    if header is not None:
        text = header.decode("latin-1").strip().lower()
        if text not in RANK:
            raise RouterError(400, f"header x-llmgw-priority must be one of {', '.join(PRIORITIES)}, "
                                   f"not {text[:40]!r}", code="invalid_priority")
        asked = text  # type: ignore[assignment]  # checked against RANK just above
    elif service_tier is not None:
        if not isinstance(service_tier, str) or service_tier not in _SERVICE_TIERS:
            raise RouterError(400, f"service_tier must be one of {', '.join(_SERVICE_TIERS)}",
                              param="service_tier", code="invalid_value")
        asked = _SERVICE_TIERS[service_tier]
    if asked is None or asked == tenancy.priority:
        return tenancy.priority
    if RANK[asked] < RANK[tenancy.priority] and not tenancy.may_choose:
        raise RouterError(403, f"group {tenancy.group!r} runs at priority {tenancy.priority!r} and may not ask "
                               f"for {asked!r}; an operator can allow it: "
                               f"llmgw keys group set {tenancy.group} --may-choose-priority yes",
                          code="priority_not_allowed")
    return asked


class Slot:
    """A request's hold on one of a model's slots; `charge` its real token count."""

    __slots__ = ("ticket", "tokens")

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket
        self.tokens: int | None = None

    def charge(self, tokens: int) -> None:
        self.tokens = (self.tokens or 0) + tokens

    @property
    def waited(self) -> float:
        """Seconds spent in the queue."""
        return (self.ticket.started or self.ticket.arrived) - self.ticket.arrived

    def headers(self) -> list[tuple[bytes, bytes]]:
        """What the response tells its client of its wait: milliseconds, and how many
        requests of the model started while it waited (0: it got the first free slot)."""
        return [(b"x-llmgw-queue-ms", b"%d" % round(self.waited * 1000)),
                (b"x-llmgw-queue-passed", b"%d" % self.ticket.ahead)]


class Admission:
    """Every model's slots in this process, and the waits for them."""

    def __init__(self, settings: RouterSettings, table: Callable[[], RoutingTable], *,
                 metrics: RouterMetrics | None = None, slots: SlotCounts | None = None, workers: int = 1,
                 index: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.table = table
        self.workers = max(1, workers)
        self.index = index
        self.clock = clock
        self.scheduler = Scheduler(max_queue=settings.max_queue,
                                   starve_after=settings.starve_after if settings.starve_after > 0 else None,
                                   headroom=max(0, settings.headroom_slots))
        self.metrics = metrics
        self.slots = slots
        self._waiters: dict[Ticket, asyncio.Future[None]] = {}

    def capacity(self, model: str) -> int:
        """This worker's slots for `model` over its routable replicas; 0: no limit."""
        entry = self.table().models.get(model)
        if entry is None:
            return 0
        # The routable replicas; when every one is ejected, the ready ones the proxy then
        # tries anyway (panic mode); none ready: no limit (on demand starts one, or a 503).
        replicas = entry.routable(time.monotonic()) or [r for r in entry.replicas if r.state == "ready"]
        slots = [replica_slots(r, self.settings, self.slots, entry.record) for r in replicas]
        if not slots or 0 in slots:  # a replica without a limit: the engine's queue decides
            return 0
        total = sum(slots)
        mine = total // self.workers + (1 if self.index < total % self.workers else 0)
        return max(1, mine)

    @asynccontextmanager
    async def slot(self, model: str, tenancy: Tenancy, priority: Priority | None = None,
                   cost: int = 0) -> AsyncIterator[Slot]:
        """Hold one of `model`'s slots for the body of the `with` (waiting for it first)."""
        now = self.clock()
        ticket = Ticket(group=tenancy.group, priority=priority or tenancy.priority, cost=float(max(cost, 0)),
                        share=tenancy.share, arrived=now)
        self._wake(self.scheduler.arrive(model, ticket, self.capacity(model), now), model)
        if ticket.state == "waiting":
            self._count("admission_enqueued", model, ticket)
            fut = self._waiters[ticket] = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.settings.queue_timeout)
            except TimeoutError:
                self._count("admission_dequeued", model, ticket, "timeout")
                self._count("admission_refused", model, ticket, "timeout")
                self._leave(model, ticket, None)
                raise RouterError(503, f"model {model!r} is at capacity and this request waited "
                                       f"{self.settings.queue_timeout:g} s for a slot; try again shortly",
                                  code="queue_timeout",
                                  headers={"Retry-After": str(self.settings.retry_after)}) from None
            except BaseException:  # the client left, or the router stops: give the place up
                self._count("admission_dequeued", model, ticket, "left")
                self._leave(model, ticket, None)
                raise
            finally:
                self._waiters.pop(ticket, None)
            self._count("admission_dequeued", model, ticket, "started" if ticket.now_in() == "running" else "shed")
        if ticket.now_in() == "shed":
            self._count("admission_refused", model, ticket, "queue_full")
            raise RouterError(429, f"model {model!r} is at capacity and its queue is full "
                                   f"({self.settings.max_queue} waiting); try again shortly",
                              code="server_overloaded", headers={"Retry-After": str(self.settings.retry_after)})
        held = Slot(ticket)
        if self.metrics is not None:
            key = (self.metrics._model(model), ticket.group, ticket.priority)
            self.metrics._observe("admission_wait_seconds", key, held.waited)
        try:
            yield held
        finally:
            self._leave(model, ticket, held.tokens)

    def _count(self, name: str, model: str, ticket: Ticket, *more: str) -> None:
        if self.metrics is not None:
            self.metrics._count(name, (self.metrics._model(model), ticket.group, ticket.priority, *more))

    def _leave(self, model: str, ticket: Ticket, tokens: int | None) -> None:
        self._wake(self.scheduler.finish(model, ticket, tokens, self.capacity(model), self.clock()), model)

    def _wake(self, changed: list[Ticket], model: str) -> None:
        for t in changed:
            fut = self._waiters.get(t)
            if fut is not None and not fut.done():
                fut.set_result(None)  # started or shed: slot() reads which from the ticket

    def queued(self) -> dict[str, int]:
        """Requests waiting per model, as demand scaling counts load (ondemand.py's report)."""
        return {m: q.queued for m, q in self.scheduler.models.items() if q.queued}

    def queue_wait(self) -> dict[str, float]:
        """Seconds the longest waiter of each model with a queue has waited (demand scaling
        reads it: a queue that stays long is saturation whatever the in-flight target says)."""
        now = self.clock()
        return {m: max(0.0, now - t) for m, t in self.scheduler.oldest().items()}

    def pump(self) -> None:
        """Start waiters a capacity change made room for (a replica became ready)."""
        for model in [m for m, q in self.scheduler.models.items() if q.queued]:
            self._wake(self.scheduler.pump(model, self.capacity(model), self.clock()), model)
