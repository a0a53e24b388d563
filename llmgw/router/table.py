"""The routing table: the applied state as the router sees it, plus what it learns.

The state file says what exists (models, replicas, their `starting|ready|draining`
state); the router adds per-replica runtime facts — health, in-flight count, last use,
consecutive failures — that outlive any one state reload. A reload builds a new
immutable table but keeps each replica's runtime object by id, so a request running
on a replica that turns `draining` keeps counting against it until it finishes.

Ejection is bounded, as in Envoy's outlier detection: a replica is taken out of
rotation after `threshold` consecutive failures (or at once on decisive evidence: the
engine refuses connections, or its health check says it is down), for a backoff that
doubles with each ejection; at most `max_share` of a model's ready replicas are ejected
at once (always at least one may be); and when every ready replica of a model is
ejected the proxy tries them anyway (panic mode) rather than answer 503 to everyone.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from llmgw.router.balance import Ring, pick_by_prefix
from llmgw.router.routes import RouteRuntime
from llmgw.state import AdapterRecord, ModelRecord, Replica, State

# busy: alive but saturated (its health check is slow, or says no slot is free): still routed to.
Health = Literal["unknown", "healthy", "busy", "unhealthy"]


@dataclass(frozen=True)
class EjectionPolicy:
    """How many failures eject a replica, for how long, and how many may be out at once."""

    threshold: int = 3
    max_share: float = 0.5
    base: float = 1.0
    cap: float = 30.0


class ReplicaRuntime:
    """What the router knows about one replica beyond the state file."""

    __slots__ = ("backoff_until", "ejections", "endpoint", "failures", "first_seen", "health", "id", "in_flight",
                 "last_active", "last_error", "last_used", "model", "record", "requests", "state")

    def __init__(self, record: Replica) -> None:
        self.id = record.id
        self.record = record
        self.model = record.model
        self.state = record.state
        self.endpoint = record.endpoint.rstrip("/")
        self._start_counters()
        self.health: Health = "unknown"
        self.failures = 0  # consecutive: a success or a passing health check resets it
        self.ejections = 0  # consecutive ejections: each doubles the next backoff
        self.backoff_until = 0.0  # monotonic: ejected until then
        self.last_error: str | None = None

    def _start_counters(self) -> None:
        """In flight, requests, last use: plain fields in one process (shared.py keeps them
        in shared memory when the router runs several workers)."""
        self.in_flight = 0
        self.requests = 0
        self.last_used: float | None = None  # wall clock (time.time()) of the last request start or end
        self.first_seen = time.monotonic()
        self.last_active = self.first_seen  # monotonic: last request start or end, else first seen

    def update(self, record: Replica) -> None:
        self.record = record
        self.model = record.model
        self.state = record.state
        endpoint = record.endpoint.rstrip("/")
        if endpoint != self.endpoint:
            # A new address is a new process: forget what we learnt about the old one.
            self.endpoint = endpoint
            self.health = "unknown"
            self.failures = 0
            self.ejections = 0
            self.backoff_until = 0.0

    def begin(self) -> None:
        self.in_flight += 1
        self.requests += 1
        self.last_used = time.time()
        self.last_active = time.monotonic()

    def end(self) -> None:
        self.in_flight -= 1
        self.last_used = time.time()
        self.last_active = time.monotonic()

    def routable(self, now: float) -> bool:
        """May a new request go here? Only `ready`, and not ejected."""
        return self.state == "ready" and not self.ejected(now)

    def ejected(self, now: float) -> bool:
        return self.health == "unhealthy" and now < self.backoff_until

    def mark_failure(self, error: str, *, base: float, cap: float, now: float | None = None) -> None:
        """Eject now: out of rotation for base * 2**(n-1) seconds after the n-th ejection in a row."""
        self.failures += 1
        self.ejections += 1
        self.health = "unhealthy"
        self.last_error = error
        delay = min(cap, base * (2 ** min(self.ejections - 1, 16)))
        self.backoff_until = (time.monotonic() if now is None else now) + delay

    def note_failure(self, error: str) -> int:
        """One more failure in a row, without ejecting; returns how many in a row."""
        self.failures += 1
        self.last_error = error
        return self.failures

    def mark_success(self) -> None:
        """A request got its first byte: the failures in a row are over."""
        self.failures = 0
        if self.health != "healthy" and self.health != "busy":
            self.health = "healthy"
            self.ejections = 0
            self.backoff_until = 0.0

    def mark_healthy(self) -> None:
        self.health = "healthy"
        self.failures = 0
        self.ejections = 0
        self.backoff_until = 0.0

    def mark_busy(self) -> None:
        """Alive but saturated: keep routing (in-flight counts spread the load); not a failure."""
        if self.health != "unhealthy" or not self.ejected(time.monotonic()):
            self.health = "busy"


@dataclass
class ModelEntry:
    """One model of the state with its replicas (every state) in state-file order."""

    record: ModelRecord
    replicas: list[ReplicaRuntime] = field(default_factory=list)
    rotation: int = 0  # spreads ties between equally loaded replicas
    ring: Ring | None = field(default=None, repr=False)  # prefix-affinity's hash ring, made on first use
    route: RouteRuntime | None = field(default=None, repr=False)  # a weighted route (routes.py): no replicas
    # A LoRA adapter (adapters.py): served by the replicas of `base` that loaded it, which are
    # its `replicas` (the same runtimes as the base's, so in-flight counts are shared).
    adapter: AdapterRecord | None = None
    base: str | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def on_demand(self) -> bool:
        """Started by a request when nothing runs; never a route, which has nothing of its own to
        start, nor an adapter (its base is what starts)."""
        return self.record.scaling.min == 0 and self.route is None and self.base is None

    def routable(self, now: float) -> list[ReplicaRuntime]:
        return [r for r in self.replicas if r.routable(now)]

    @property
    def by_prefix(self) -> bool:
        """Does this model route by prompt prefix (so pick wants the request's prefix key)?"""
        return self.record.routing == "prefix-affinity"

    def pick(self, exclude: set[str], now: float, *, panic: bool = False,
             prefix: int | None = None) -> ReplicaRuntime | None:
        """Least outstanding requests among routable replicas not yet tried.

        In panic mode, ejected ones count too: every `ready` replica not yet tried.
        With a `prefix` key (balance.prefix_key) and routing `prefix-affinity`: the same
        candidates, chosen by bounded-load consistent hashing (balance.py).
        """
        replicas = self.replicas
        n = len(replicas)
        if n == 0:
            return None
        if prefix is not None and self.by_prefix:
            if self.ring is None:
                self.ring = Ring(r.id for r in replicas)
            return pick_by_prefix(self.ring, prefix, [
                r for r in replicas
                if r.id not in exclude and r.state == "ready" and (panic or not r.ejected(now))])
        self.rotation = (self.rotation + 1) % n
        best: ReplicaRuntime | None = None
        for i in range(n):
            r = replicas[(self.rotation + i) % n]
            if r.id in exclude or r.state != "ready" or (not panic and r.ejected(now)):
                continue
            if best is None or r.in_flight < best.in_flight:
                best = r
        return best

    def may_eject(self, replica: ReplicaRuntime, max_share: float, now: float) -> bool:
        """Would ejecting `replica` keep the model within its share of ejected replicas?"""
        ready = [r for r in self.replicas if r.state == "ready"]
        out = sum(1 for r in ready if r is not replica and r.ejected(now))
        return out < max(1, int(len(ready) * max_share))

    def failed(self, replica: ReplicaRuntime, error: str, policy: EjectionPolicy, *, decisive: bool = False,
               now: float | None = None) -> bool:
        """A request or check failed on `replica`: eject it when the policy says so; True if ejected.

        `decisive`: the evidence says the engine is down (refused, health check down), so
        one failure ejects. Otherwise `threshold` failures in a row do. Either way only
        while the model stays within `max_share` ejected.
        """
        now = time.monotonic() if now is None else now
        count = replica.note_failure(error)
        if replica.ejected(now):
            return True
        if (decisive or count >= policy.threshold) and self.may_eject(replica, policy.max_share, now):
            replica.failures -= 1  # mark_failure counts this failure again
            replica.mark_failure(error, base=policy.base, cap=policy.cap, now=now)
            return True
        return False


class RoutingTable:
    """An immutable view of one state serial; lookups by name or alias."""

    def __init__(self, state: State, previous: dict[str, ReplicaRuntime] | None = None,
                 runtime: Callable[[Replica, Collection[str]], ReplicaRuntime] | None = None,
                 routes: dict[str, tuple[tuple[object, ...], RouteRuntime]] | None = None) -> None:
        """`runtime(record, live_ids)` makes a new replica's runtime (shared.py's with workers);
        `routes` are the previous table's route runtimes (`self.routes`), kept where unchanged."""
        previous = previous or {}
        live = [r.id for r in state.replicas]
        self.serial = state.serial
        self.lineage = state.lineage
        self.models: dict[str, ModelEntry] = {m.name: ModelEntry(m) for m in state.models}
        self.names: dict[str, ModelEntry] = {}
        for m in self.models.values():
            for alias in m.record.aliases:
                self.names[alias] = m
        for m in self.models.values():  # a real name wins over a clashing alias
            self.names[m.name] = m
        self.replicas: dict[str, ReplicaRuntime] = {}
        for rec in state.replicas:
            rt = previous.get(rec.id)
            if rt is None:
                rt = ReplicaRuntime(rec) if runtime is None else runtime(rec, live)
            else:
                rt.update(rec)
            self.replicas[rec.id] = rt
            entry = self.models.get(rec.model)
            if entry is not None:
                entry.replicas.append(rt)
        self.adapters = self._adapters()
        self.routes = self._routes(routes or {})

    def _adapters(self) -> dict[str, ModelEntry]:
        """An entry per LoRA adapter, by name: its replicas are those of its base that list it
        (a replica started before the adapter was added never gets its requests). A name a model
        already has (an edited state) stays the model's."""
        out: dict[str, ModelEntry] = {}
        for m in list(self.models.values()):
            for a in m.record.adapters:
                if a.name in self.names or a.name in out:
                    continue
                # max_loras: the base's (its replicas load the adapter at run time, router/lora.py).
                record = ModelRecord(name=a.name, aliases=a.aliases, scaling=m.record.scaling,
                                     routing=m.record.routing, max_loras=m.record.max_loras)
                entry = ModelEntry(record, [r for r in m.replicas if a.name in r.record.adapter_names],
                                   adapter=a, base=m.name)
                out[a.name] = entry
                for alias in a.aliases:
                    self.names.setdefault(alias, entry)
                self.names[a.name] = entry
        return out

    def _routes(self, previous: dict[str, tuple[tuple[object, ...], RouteRuntime]]
                ) -> dict[str, tuple[tuple[object, ...], RouteRuntime]]:
        """A runtime per weighted route. A route's guard findings last while the route and its
        targets' replicas stay as they were (routes.py): a new split, or a canary replaced, starts afresh."""
        out: dict[str, tuple[tuple[object, ...], RouteRuntime]] = {}
        for m in self.models.values():
            record = m.record.route
            if record is None:
                continue
            ident = (record, tuple(tuple(sorted((r.id, r.record.spec_hash) for r in self.models[t.model].replicas))
                                   if t.model in self.models else () for t in record.targets))
            kept = previous.get(m.name)
            # The same in every worker of a router (they read the same state): /metrics merges their trips by it.
            generation = hashlib.sha256(repr(ident).encode()).hexdigest()[:12]
            rt = kept[1] if kept is not None and kept[0] == ident else RouteRuntime(m.name, record, generation)
            m.route = rt
            out[m.name] = (ident, rt)
        return out

    @classmethod
    def empty(cls, runtime: Callable[[Replica, Collection[str]], ReplicaRuntime] | None = None) -> RoutingTable:
        return cls(State(lineage=""), runtime=runtime)

    def resolve(self, name: str) -> ModelEntry | None:
        return self.names.get(name)

    def chain(self, entry: ModelEntry) -> list[ModelEntry]:
        """The model, then its fallbacks in order (each once, unknown ones skipped).

        A weighted route's chain is its targets' (largest share first, each with its own
        fallbacks), then the route's fallbacks; the proxy orders the targets per request."""
        if entry.route is not None:
            order = [name for name, _ in sorted(entry.route.shares(), key=lambda s: -s[1])]
            return self.route_chain(entry, order)
        out = [entry]
        seen = {entry.name}
        for fb in entry.record.fallbacks:
            e = self.models.get(fb)
            if e is not None and e.name not in seen:
                seen.add(e.name)
                out.append(e)
        return out

    def route_chain(self, route: ModelEntry, order: list[str],
                    chain: Callable[[ModelEntry], list[ModelEntry]] | None = None) -> list[ModelEntry]:
        """A route's targets in `order`, each followed by its fallbacks (`chain(target)`: this
        table's, or one restricted to an endpoint), then the route's own fallbacks; each model once."""
        out: list[ModelEntry] = []
        seen: set[str] = set()
        for name in [*order, *route.record.fallbacks]:
            target = self.models.get(name)
            if target is None or target.route is not None:
                continue
            for e in (chain or self.chain)(target):
                if e.name not in seen:
                    seen.add(e.name)
                    out.append(e)
        return out


class ChainView(RoutingTable):
    """The routing table as one request sees it: only the chain the proxy may try (a weighted
    route's targets in this request's order). It builds no table: the proxy reads `chain()` alone."""

    def __init__(self, chain: list[ModelEntry]) -> None:
        self._chain = chain

    def chain(self, entry: ModelEntry) -> list[ModelEntry]:
        return self._chain
