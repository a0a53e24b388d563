"""Which replica of a model takes a request: the model's routing policy.

- `least-load` (the default): the routable replica with the fewest requests in flight,
  ties spread in turn (table.py's `ModelEntry.pick`).
- `prefix-affinity`: requests whose prompts start alike go to the same replica, so the
  engine's prompt cache (llama.cpp's slots, vLLM's automatic prefix caching) already
  holds their prefix and only the rest is prefilled. The prefix (a long system prompt
  alone, else the system prompt and the first user turn; the head of a completion
  prompt; a response's instructions, and its input unless they are long) is hashed to a
  point on a ring of virtual nodes, `VNODES` per replica; the
  request goes to the first replica clockwise that is routable and not over its bound,
  `ceil(LOAD_FACTOR * average in flight) + SLACK` counting the request itself (consistent
  hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam 2017), so a popular
  prefix spills to the next replicas on the ring instead of making one hot. When every
  candidate is over its bound (or was tried), the least-loaded one takes it.

Keys and ring points are blake2b digests, never Python's `hash()`: every router and
every worker process of one must place a prefix on the same replica. The prefix is
read from the request as already parsed, at most `PREFIX_CHARS` characters of it, so
a long prompt costs no more to place than a short one.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from hashlib import blake2b
from typing import Any, Protocol, TypeVar

VNODES = 64  # points per replica on the ring: with 3 replicas, shares within ~15% of even
LOAD_FACTOR = 1.25  # a replica takes a prefix while its in-flight stays within 1.25x the average
# ... plus this many: at a few requests in flight, 1.25x the average alone is 1 (3 replicas,
# 2 in flight), which sends any two requests of one prefix at once to two replicas, one of
# them without its prefix cached: strict balance at low load. A request more than its
# share costs an engine that batches little; a miss costs the whole prefill (bench/prefix).
SLACK = 1
# Characters of the prompt's head that make its key. Long enough to tell a system prompt
# or a document apart, short enough to hash in microseconds; prompts that differ only
# after this share a replica, which is what a shared long prefix should do.
PREFIX_CHARS = 2048
# A system prompt (or a response's instructions) at least this long is what conversations
# share: the key is it alone, so every conversation over it lands on one replica, whose
# cache then holds it (and each conversation's later turns go there too). Below this, a
# system prompt shared by much traffic ("You are a helpful assistant.") says little about
# where a prompt's cache is: the first user turn joins the key and keeps each conversation
# on one replica. Without this, a 1,800-character system prompt left room in PREFIX_CHARS
# for the start of the first user turn, so every conversation over it had a key of its
# own and went anywhere (bench/prefix measured no gain over least-load).
SHARED_SYSTEM_CHARS = 512
SYSTEM_ROLES = ("system", "developer")


class Candidate(Protocol):
    """What the policy reads of a replica (table.py's ReplicaRuntime)."""

    @property
    def id(self) -> str: ...

    @property
    def in_flight(self) -> int: ...


C = TypeVar("C", bound=Candidate)


def _point(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


class Ring:
    """The hash ring of one model's replicas (by id), built once per routing table."""

    __slots__ = ("_count", "_owners", "_points")

    def __init__(self, ids: Iterable[str], vnodes: int = VNODES) -> None:
        pairs = sorted((_point(f"{rid}#{v}".encode()), rid) for rid in ids for v in range(vnodes))
        self._points = [p for p, _ in pairs]
        self._owners = [rid for _, rid in pairs]
        self._count = len(set(self._owners))

    def walk(self, key: int) -> Iterator[str]:
        """Replica ids clockwise from `key`, each once: the preference order for that key.

        Lazy: a request that takes its first choice reads one point of the ring."""
        n = len(self._points)
        seen: set[str] = set()
        i = bisect.bisect_left(self._points, key)
        for _ in range(n):
            rid = self._owners[i % n]
            i += 1
            if rid not in seen:
                seen.add(rid)
                yield rid
                if len(seen) == self._count:
                    return

    def order(self, key: int) -> list[str]:
        return list(self.walk(key))


def bound(total_in_flight: int, replicas: int, factor: float = LOAD_FACTOR) -> int:
    """The most requests one replica may hold once this one is placed."""
    return math.ceil(factor * (total_in_flight + 1) / replicas) + SLACK


def pick_by_prefix(ring: Ring, key: int, candidates: Sequence[C], factor: float = LOAD_FACTOR,
                   fallback: Callable[[Sequence[C]], C | None] | None = None) -> C | None:
    """The first of `candidates` clockwise from `key` within the load bound, else the fallback's choice.

    `candidates` are the replicas this request may go to (routable, not yet tried); the
    bound is taken over them. `fallback` defaults to the least in flight.
    """
    if not candidates:
        return None
    by_id = {c.id: c for c in candidates}
    limit = bound(sum(c.in_flight for c in candidates), len(candidates), factor)
    for rid in ring.walk(key):
        c = by_id.get(rid)
        if c is not None and c.in_flight + 1 <= limit:
            return c
    if fallback is not None:
        return fallback(candidates)
    return min(candidates, key=lambda c: c.in_flight)


# -- the prefix of a request ------------------------------------------------------------
def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content[:8]:  # the head only: a prefix, not the whole message
            if isinstance(part, dict):
                t = part.get("text")
                if isinstance(t, str):
                    parts.append(t)
                elif isinstance(part.get("type"), str):
                    parts.append(f"<{part['type']}>")  # an image or file: its kind, never its bytes
            elif isinstance(part, str):
                parts.append(part)
        return "\x1f".join(parts)
    return ""


def _turns(items: Any) -> Iterable[str]:
    """Role and text of the leading system messages, and, unless those hold at least
    SHARED_SYSTEM_CHARS, of the messages up to and including the first user turn.

    The same for every turn of one conversation (later turns are appended after it), and
    for every conversation over one long system prompt. Lazy: the caller stops reading at
    PREFIX_CHARS.
    """
    if isinstance(items, str):
        yield items
        return
    if not isinstance(items, list):
        return
    system = 0  # characters of the leading system messages
    leading = True
    for m in items:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        text = _text(m.get("content"))
        if leading and role in SYSTEM_ROLES:
            system += len(text)
        elif leading:
            leading = False
            if system >= SHARED_SYSTEM_CHARS:
                return
        yield f"\x1e{role if isinstance(role, str) else ''}\x1d"
        yield text
        if role == "user":
            return


def _head(pieces: Iterable[str], limit: int) -> bytes:
    out: list[str] = []
    left = limit
    for p in pieces:
        if left <= 0:
            break
        out.append(p[:left])
        left -= len(out[-1])
    return "".join(out).encode("utf-8", "surrogatepass")


def _prompt(prompt: Any, limit: int) -> Iterable[str]:
    """A completion prompt's head: a string, the first of a list of strings, or token ids."""
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int):  # token ids: ~4 characters of text each
            yield ",".join(str(t) for t in prompt[:limit // 4] if isinstance(t, int))
            return
        prompt = first
        if isinstance(prompt, list):  # a batch of token-id lists
            yield ",".join(str(t) for t in prompt[:limit // 4] if isinstance(t, int))
            return
    if isinstance(prompt, str):
        yield prompt


def prefix_key(endpoint: str, req: dict[str, Any], limit: int = PREFIX_CHARS) -> int | None:
    """The ring point of a parsed request's prompt head; None when it has none to share."""
    if endpoint == "POST /v1/chat/completions":
        pieces: Iterable[str] = _turns(req.get("messages"))
    elif endpoint == "POST /v1/completions":
        pieces = _prompt(req.get("prompt"), limit)
    elif endpoint == "POST /v1/responses":
        instructions = req.get("instructions")
        if isinstance(instructions, str) and len(instructions) >= SHARED_SYSTEM_CHARS:
            pieces = [instructions]
        else:
            pieces = [instructions if isinstance(instructions, str) else "", "\x1e", *_turns(req.get("input"))]
    else:
        return None
    head = _head(pieces, limit)
    if not head.strip(b"\x1e\x1d"):
        return None
    return _point(head)
