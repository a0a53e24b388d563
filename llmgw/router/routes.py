"""Weighted routes in the router: which target a request goes to, and the canary guard.

A route (catalog `routes:`, docs/routes.md) splits a served name between models. Each
request is placed by a stable hash of its API key id and its prompt head (the messages up
to the first user turn, or a completion prompt's first characters): every turn of one
conversation repeats that head, so one user's conversation stays on one target, and
over many keys and conversations the shares follow the weights. The hash is SHA-256,
not Python's `hash()` (seeded per process): every worker and every router places a
conversation the same way.

The guard watches each canary (every target but the stable one: the largest weight) over
a sliding window of its attempts: the share that failed (an engine 5xx, or no answer) and
the 90th percentile of its streams' time to first token. A canary that breaks a limit
with at least `min_requests` attempts in the window is *tripped*: its share goes to the
stable target, and it stays tripped for as long as this runtime lives. The routing table
keeps a route's runtime across state reloads while the route's record and its canary's
replicas are unchanged (table.py), so the next commit that edits the route (`llmgw
shift`) or replaces the canary resets it, and an unrelated state write does not.

With several worker processes each worker keeps its own window and trips on its own
traffic (each sees a share of the same canary's failures, so they trip alike).

This module imports nothing of the router's: table.py holds a `RouteRuntime` per route.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llmgw.state import RouteRecord

HEAD_CHARS = 512  # of the prompt head hashed: enough to tell conversations apart
SCALE = 10_000  # placement points: a weight of 1 % is 100 of them
_MAX_EVENTS = 100_000  # per target and window: a bound on memory at any request rate


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _turns(items: Any) -> Iterator[str]:
    """The messages up to and including the first user turn: what every later turn repeats."""
    if isinstance(items, str):
        yield items
        return
    if not isinstance(items, list):
        return
    for m in items:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        yield f"\x1e{role if isinstance(role, str) else ''}\x1d{_text(m.get('content'))}"
        if role == "user":
            return


def prompt_head(endpoint: str, req: dict[str, Any]) -> str:
    """The head of the request's prompt that stays the same for a whole conversation."""
    if endpoint == "POST /v1/chat/completions":
        pieces: Iterable[str] = _turns(req.get("messages"))
    elif endpoint == "POST /v1/responses":
        instructions = req.get("instructions")
        pieces = [instructions if isinstance(instructions, str) else "", "\x1e", *_turns(req.get("input"))]
    else:
        prompt = req.get("prompt", req.get("input"))
        while isinstance(prompt, list) and prompt and isinstance(prompt[0], list | str):
            prompt = prompt[0]
        pieces = [prompt if isinstance(prompt, str) else ",".join(str(t) for t in prompt[:HEAD_CHARS // 4])
                  if isinstance(prompt, list) else ""]
    out, left = [], HEAD_CHARS
    for p in pieces:
        if left <= 0:
            break
        out.append(p[:left])
        left -= len(out[-1])
    return "".join(out)


def placement(key_id: str, head: str) -> int:
    """Where a (key, conversation) falls in [0, SCALE): stable across processes and restarts."""
    digest = hashlib.sha256(key_id.encode("utf-8", "surrogatepass") + b"\x00"
                            + head.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % SCALE


def pick(shares: list[tuple[str, int]], point: int) -> str:
    """The target whose band of [0, SCALE) holds `point`; bands follow the listed order,
    each `weight` percent wide. A zero weight has no band."""
    edge = 0
    for name, weight in shares:
        edge += weight * SCALE // 100
        if point < edge:
            return name
    return max(shares, key=lambda s: s[1])[0]  # only when the weights do not add up to 100


@dataclass
class TargetStats:
    """One target's recent attempts: (monotonic time, failed) and (time, TTFT seconds)."""

    attempts: deque[tuple[float, bool]] = field(default_factory=deque)
    ttfts: deque[tuple[float, float]] = field(default_factory=deque)

    def prune(self, since: float) -> None:
        while self.attempts and (self.attempts[0][0] < since or len(self.attempts) > _MAX_EVENTS):
            self.attempts.popleft()
        while self.ttfts and (self.ttfts[0][0] < since or len(self.ttfts) > _MAX_EVENTS):
            self.ttfts.popleft()

    def error_rate(self) -> float:
        return sum(1 for _, failed in self.attempts if failed) / len(self.attempts) if self.attempts else 0.0

    def ttft_p90(self) -> float | None:
        if not self.ttfts:
            return None
        ordered = sorted(t for _, t in self.ttfts)
        return ordered[min(len(ordered) - 1, (len(ordered) * 9 + 9) // 10 - 1)]  # nearest rank


@dataclass(frozen=True)
class Trip:
    """Why a canary lost its share, in words for /metrics' readers, the admin API and status."""

    target: str
    reason: str
    at: float  # wall clock (time.time())


class RouteRuntime:
    """One route as this router process routes it: its split, and its guard's findings."""

    def __init__(self, name: str, record: RouteRecord, generation: str = "") -> None:
        self.name = name
        self.record = record
        self.generation = generation  # which version of the route this is (table.py): labels its trips
        self.targets = [t.model for t in record.targets]
        self.stable = max(record.targets, key=lambda t: t.weight).model  # the first listed of equals
        self.stats: dict[str, TargetStats] = {t: TargetStats() for t in self.targets}
        self.tripped: dict[str, Trip] = {}
        self.trips = 0  # how many canaries tripped in this runtime's life (the metrics count them)

    def shares(self, tripped: Collection[str] | None = None) -> list[tuple[str, int]]:
        """The split in force: the catalog's, with every tripped canary's weight (this process's, or
        `tripped`: those any worker tripped, as /metrics merges them) on the stable target."""
        out = self.tripped if tripped is None else tripped
        moved = sum(t.weight for t in self.record.targets if t.model in out)
        return [(t.model, 0 if t.model in out else t.weight + (moved if t.model == self.stable else 0))
                for t in self.record.targets]

    def order(self, key_id: str, endpoint: str, req: dict[str, Any]) -> list[str]:
        """The targets for one request: the one its key and conversation fall on, then the others
        (largest share first, the stable one before any canary of equal weight), tripped ones last."""
        shares = self.shares()
        first = pick(shares, placement(key_id, prompt_head(endpoint, req)))
        rest = sorted((s for s in shares if s[0] != first),
                      key=lambda s: (s[0] in self.tripped, -s[1], s[0] != self.stable))
        return [first, *(name for name, _ in rest)]

    # -- the guard ---------------------------------------------------------------------
    def _judged(self, target: str) -> TargetStats | None:
        """The window of a target the guard judges: a canary not tripped yet (nothing is kept of
        the others, so nothing grows without a bound)."""
        if self.record.guard is None or target == self.stable or target in self.tripped:
            return None
        return self.stats.get(target)

    def attempted(self, target: str, failed: bool, now: float | None = None) -> Trip | None:
        """An attempt on `target` ended (failed: a 5xx or no answer); a new Trip when the guard trips."""
        stats = self._judged(target)
        if stats is None:
            return None
        now = time.monotonic() if now is None else now
        stats.attempts.append((now, failed))
        return self._judge(target, stats, now)

    def first_token(self, target: str, seconds: float, now: float | None = None) -> Trip | None:
        stats = self._judged(target)
        if stats is None:
            return None
        now = time.monotonic() if now is None else now
        stats.ttfts.append((now, seconds))
        return self._judge(target, stats, now)

    def _judge(self, target: str, stats: TargetStats, now: float) -> Trip | None:
        guard = self.record.guard
        assert guard is not None
        stats.prune(now - guard.window)
        reason = None
        if guard.max_error_ppm is not None and len(stats.attempts) >= guard.min_requests:
            rate = stats.error_rate()
            if rate * 1_000_000 > guard.max_error_ppm:
                reason = (f"{rate:.1%} of its last {len(stats.attempts)} requests failed in {guard.window} s "
                          f"(max_error_rate {guard.max_error_ppm / 10_000:g}%)")
        if reason is None and guard.max_ttft_p90_ms is not None and len(stats.ttfts) >= guard.min_requests:
            p90 = stats.ttft_p90()
            if p90 is not None and p90 * 1000 > guard.max_ttft_p90_ms:
                reason = (f"its time to first token p90 was {p90:.3g} s over {len(stats.ttfts)} streams in "
                          f"{guard.window} s (max_ttft_p90 {guard.max_ttft_p90_ms / 1000:g} s)")
        if reason is None:
            return None
        trip = Trip(target, f"{target} broke the guard of route {self.name}: {reason}; its share goes to "
                            f"{self.stable} until the route changes", time.time())
        self.tripped[target] = trip
        self.trips += 1
        return trip

    def note(self, target: str) -> str:
        """Why `target` lost its share, for `llmgw status`: this process's finding, or (another
        worker's) what the merged counts say."""
        trip = self.tripped.get(target)
        return trip.reason if trip is not None else (f"{target} broke the guard of route {self.name}; its share "
                                                     f"goes to {self.stable} until the route changes")

    def report(self, tripped: Collection[str] | None = None) -> dict[str, Any]:
        """The route for the admin API; `tripped`: the canaries any worker tripped (else this process's)."""
        out = set(self.tripped) if tripped is None else set(tripped)
        shares = dict(self.shares(out))
        return {"stable": self.stable, "generation": self.generation, "guard": None if self.record.guard is None else
                self.record.guard.model_dump(),
                "targets": [{"model": t.model, "weight": t.weight, "share": shares[t.model],
                             "tripped": t.model in out, **({"reason": self.note(t.model)} if t.model in out else {}),
                             **({"tripped_at": self.tripped_at(t.model)} if t.model in self.tripped else {})}
                            for t in self.record.targets]}

    def tripped_at(self, target: str) -> str:
        """When this process's guard tripped `target`, ISO 8601 UTC (another worker's trip has no
        time here: the merged counts say only which targets it tripped)."""
        return datetime.fromtimestamp(self.tripped[target].at, UTC).isoformat(timespec="seconds")
