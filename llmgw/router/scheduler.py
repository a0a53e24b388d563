"""Who goes next when a model's replicas are full: priorities, then fair share, then arrival.

Pure and synchronous (no asyncio, no clock of its own: every call is given `now`), so the
unit tests drive it with a virtual clock; admission.py wraps it for the event loop.

One `ModelQueue` per model. A request holds a `Ticket`; `arrive` either starts it (a slot
is free and nobody is waiting ahead of it) or queues it. When a slot frees (`finish`) or
capacity grows (`pump`), `next_ticket` picks:

1. the strictly highest priority class with someone waiting (interactive, batch,
   background), except that a lower class's oldest waiter that has waited `starve_after`
   seconds goes first (the optional starvation bound);
2. inside that class, the group with the least virtual tokens: served prompt+completion
   tokens divided by the group's `share` (the virtual token counter of Sheng et al.,
   "Fairness in Serving Large Language Models", OSDI 2024). A group is charged its
   request's estimated cost when the request starts, corrected to the engine's real
   count when it ends. A group that starts waiting again after being idle is lifted to
   the least counter among the groups already waiting, so idle time banks no credit; a
   tie goes to the group holding fewer slots, then to the older request;
3. inside a group, arrival order.

Bounded: at most `max_queue` waiting per model. A newcomer to a full queue displaces the
newest waiter of a strictly lower class (that one is shed); otherwise the newcomer itself
is refused. How long a waiter may wait is its caller's business (admission.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from llmgw.store.model import PRIORITIES, Priority

RANK: dict[str, int] = {p: i for i, p in enumerate(PRIORITIES)}

TicketState = Literal["waiting", "running", "shed", "done"]


@dataclass(eq=False, slots=True)
class Ticket:
    """One request's place: waiting, then running (holding a slot), then done."""

    group: str
    priority: Priority
    cost: float  # estimated tokens, charged to the group when it starts
    share: float
    arrived: float
    seq: int = 0
    state: TicketState = "waiting"
    started: float | None = None
    ahead: int = 0  # the model's starts when it arrived; at its own start, how many went first


    def now_in(self) -> TicketState:
        """The state as it is now (another call may have changed it since it was looked at)."""
        return self.state


@dataclass(slots=True)
class ModelQueue:
    """One model's waiters, its running count and its groups' virtual token counters."""

    capacity: int = 0  # slots over the model's ready replicas; 0: unknown, admit everything
    running: int = 0
    waiting: dict[Priority, dict[str, deque[Ticket]]] = field(
        default_factory=lambda: {p: {} for p in PRIORITIES})
    counters: dict[str, float] = field(default_factory=dict)  # group -> virtual tokens
    holding: dict[str, int] = field(default_factory=dict)  # group -> slots held now
    queued: int = 0
    starts: int = 0  # requests started since the model was last idle

    def waiting_groups(self) -> set[str]:
        return {g for by_group in self.waiting.values() for g in by_group}


class Scheduler:
    """Every model's queue, by name; `max_queue` and `starve_after` apply to each."""

    def __init__(self, *, max_queue: int, starve_after: float | None = None, headroom: int = 0) -> None:
        self.max_queue = max_queue
        self.starve_after = starve_after
        self.headroom = headroom
        self.models: dict[str, ModelQueue] = {}
        self._seq = 0

    def queue(self, model: str) -> ModelQueue:
        q = self.models.get(model)
        if q is None:
            q = self.models[model] = ModelQueue()
        return q

    # -- arrival -------------------------------------------------------------------------
    def arrive(self, model: str, ticket: Ticket, capacity: int, now: float) -> list[Ticket]:
        """Start `ticket` or queue it. Returns the tickets whose state changed other than
        to waiting: itself when it started or was refused (state `shed`), a displaced
        lower-class waiter (`shed`), and any others that now start."""
        q = self.queue(model)
        q.capacity = capacity
        self._seq += 1
        ticket.seq = self._seq
        ticket.ahead = q.starts
        if q.capacity <= 0 or (q.running < q.capacity and q.queued == 0 and self._may_take(q, ticket.group)):
            self._start(q, ticket, now)
            return [ticket]
        changed: list[Ticket] = []
        if q.queued >= self.max_queue:
            victim = self._lowest_newest(q)
            if victim is None or RANK[victim.priority] <= RANK[ticket.priority]:
                ticket.state = "shed"
                return [ticket]
            self._remove(q, victim)
            victim.state = "shed"
            changed.append(victim)
        self._enqueue(q, ticket)
        return changed + self.pump(model, capacity, now)

    def _enqueue(self, q: ModelQueue, ticket: Ticket) -> None:
        if ticket.group not in q.waiting_groups():
            # Back from idle: no credit for the time it sent nothing.
            floor = min((q.counters.get(g, 0.0) for g in q.waiting_groups()), default=None)
            mine = q.counters.get(ticket.group, 0.0)
            q.counters[ticket.group] = mine if floor is None else max(mine, floor)
        q.waiting[ticket.priority].setdefault(ticket.group, deque()).append(ticket)
        q.queued += 1

    # -- picking -------------------------------------------------------------------------
    def pump(self, model: str, capacity: int, now: float) -> list[Ticket]:
        """Start waiters while slots are free (after a finish, or capacity grew)."""
        q = self.queue(model)
        q.capacity = capacity
        started: list[Ticket] = []
        while q.queued and (q.capacity <= 0 or q.running < q.capacity):
            t = self.next_ticket(q, now)
            if t is None:  # pragma: no cover - queued > 0 means someone waits
                break
            if q.capacity > 0 and not self._may_take(q, t.group):
                # The headroom is left: only for a group that holds no slot, of the class due next.
                t = self.next_ticket(q, now, idle_only=True)
                if t is None:
                    break
            self._remove(q, t)
            self._start(q, t, now)
            started.append(t)
        return started

    def _may_take(self, q: ModelQueue, group: str) -> bool:
        """May `group` take a free slot now? Always, but for the last `headroom` free slots
        of a model, which only a group holding none may take: the next light or new group
        then finds a slot free instead of waiting out a running request (non-preemptive:
        that residual is most of what a light group waits under a heavy one)."""
        return q.capacity - q.running > self.headroom or not q.holding.get(group, 0)

    def next_ticket(self, q: ModelQueue, now: float, *, idle_only: bool = False) -> Ticket | None:
        """The waiter that should get the next free slot (not removed); `idle_only`: of the
        groups holding no slot, and only from the class that is due (never a lower one)."""
        classes = [p for p in PRIORITIES if q.waiting[p]]
        if not classes:
            return None
        chosen = classes[0]
        if self.starve_after is not None:
            for p in classes[1:]:  # the starvation bound: a lower class's oldest, if waited long enough
                oldest = min((d[0] for d in q.waiting[p].values()), key=lambda t: t.seq)
                if now - oldest.arrived >= self.starve_after:
                    if idle_only and q.holding.get(oldest.group, 0):
                        return None
                    return oldest
        by_group = q.waiting[chosen]
        groups = [g for g in by_group if not (idle_only and q.holding.get(g, 0))]
        if not groups:
            return None
        group = min(groups, key=lambda g: (q.counters.get(g, 0.0), q.holding.get(g, 0), by_group[g][0].seq))
        return by_group[group][0]

    def _lowest_newest(self, q: ModelQueue) -> Ticket | None:
        for p in reversed(PRIORITIES):
            if q.waiting[p]:
                return max((d[-1] for d in q.waiting[p].values()), key=lambda t: t.seq)
        return None

    def _remove(self, q: ModelQueue, ticket: Ticket) -> None:
        by_group = q.waiting[ticket.priority]
        d = by_group[ticket.group]
        d.remove(ticket)
        if not d:
            del by_group[ticket.group]
        q.queued -= 1

    def _start(self, q: ModelQueue, ticket: Ticket, now: float) -> None:
        ticket.state = "running"
        ticket.started = now
        ticket.ahead = q.starts - ticket.ahead
        q.starts += 1
        q.running += 1
        q.holding[ticket.group] = q.holding.get(ticket.group, 0) + 1
        q.counters[ticket.group] = q.counters.get(ticket.group, 0.0) + ticket.cost / ticket.share

    # -- leaving -------------------------------------------------------------------------
    def finish(self, model: str, ticket: Ticket, tokens: int | None, capacity: int, now: float) -> list[Ticket]:
        """A running ticket ended (its real token count, when known) or a waiting one left
        (cancelled, expired): free its slot and start whoever is next."""
        q = self.queue(model)
        if ticket.state == "waiting":
            self._remove(q, ticket)
        elif ticket.state == "running":
            q.running -= 1
            held = q.holding.get(ticket.group, 1) - 1
            if held > 0:
                q.holding[ticket.group] = held
            else:
                q.holding.pop(ticket.group, None)
            if tokens is not None:  # the estimate was charged at start: charge the difference
                q.counters[ticket.group] = q.counters.get(ticket.group, 0.0) + (tokens - ticket.cost) / ticket.share
        if ticket.state in ("waiting", "running"):
            ticket.state = "done"
        started = self.pump(model, capacity, now)
        self._forget(model, q)
        return started

    def _forget(self, model: str, q: ModelQueue) -> None:
        """An idle model keeps no counters: with nobody waiting or running there is no one
        to be fair to, and names from old states do not pile up."""
        if q.running == 0 and q.queued == 0:
            del self.models[model]

    # -- what metrics and the controller read ------------------------------------------------
    def oldest(self) -> dict[str, float]:
        """Per model with waiters, when its longest waiter arrived (each group's first in
        each class is its oldest: arrival order within a group)."""
        return {m: min(d[0].arrived for by_group in q.waiting.values() for d in by_group.values())
                for m, q in self.models.items() if q.queued}

    def lengths(self) -> dict[tuple[str, str], int]:
        """Waiting requests by (model, priority)."""
        return {(m, p): sum(len(d) for d in q.waiting[p].values())
                for m, q in self.models.items() for p in PRIORITIES}
