"""Group quotas: requests per minute and tokens per day, admitted in the store.

A request of a key under any limited group is admitted by the store in one
transaction, serialised per group across every router on that store (store/sql.py
`admit`): it checks each limited group in the key's chain, counts the request in its
minute, and for token limits reserves what the request may cost. The reservation is
released with the request's real usage in the next usage flush (usage.py), in the same
transaction that adds the usage, so a group's tokens are always used + reserved.

What a request may cost: its prompt, bounded as one token per `prompt_bytes_per_token`
body bytes (a token is at least one byte of text), plus its completion budget times the
sequences the engine generates (`n`, vLLM's `best_of`, one per prompt of a batched
`/v1/completions` prompt). The budget is the least of the request's `max_tokens`,
`max_completion_tokens`, `max_output_tokens` and llama.cpp's `n_predict`, else
`default_max_tokens`; endpoints that generate nothing (embeddings, rerank, score,
tokenize) have none. A request is admitted only if its prompt bound fits under the limit
beside what is used and reserved; only its completion may pass the limit. So however
many routers and concurrent requests there are, a group's tokens end at most one
request's completion budget over its limit (the last one admitted), and embeddings not
at all.

That holds only if the engine generates no more than was reserved, and an engine left
alone does not: without `max_tokens` llama-server generates until its context is full,
vLLM until the model's length, and llama.cpp reads `n_predict` before `max_tokens`. So
for a key under a token limit the router writes the reserved budget into the forwarded
body (proxy.py `upstream_body`): into every budget field the client sent, and into the
endpoint's own field (`max_tokens`, `max_output_tokens`) when it sent none of those.
Every budget and count must be an integer in range (not `100000.0`, `"100000"`, `true`,
`-1`): anything else is a 400 naming the field, for every key, before anything is
reserved or routed, so what the engine reads is always what was counted.

Why the body's size first and the engine's tokenizer only after: admission comes before
routing (the replica may be cold, on demand), and asking an engine costs a round trip per
request that the quota itself would not limit. Bytes are free and never fewer than the
tokens of the text a client sends (a chat template's own few tokens are covered by the JSON
around the text). Their cost is at the end of a day: a group with less left than a body's
bytes would be refused a prompt a quarter of that in tokens. So when the byte bound is what
a token limit refuses, and only then, the prompt is counted exactly by the tokenizers of
the engines that may serve it (tokenize.py: every ready replica's distinct tokenizer, of
the model and its fallbacks, the largest count) and admitted again by that count; where no
engine can count it (none ready, images, tools), the refusal stands. The count is the
engine's own, so "at most one request's completion budget over" still holds. Unlimited
keys, and limited keys far from their limit, never wait for a tokenizer. Each reservation
is settled with the request's real usage (the engine's count) at the next usage flush.

What the body does not hold, its bytes do not bound: a Responses request continuing a stored
response (`previous_response_id`, `conversation`: the engine prepends a history the router
never sees) or media the engine fetches by URL (an image, video, audio or file part whose URL
is not a `data:` URL, or a stored file's id: one short URL may stand for thousands of tokens).
No tokenizer counts them either, so for a key under a token limit such a request is a 400
saying what to send instead (the whole input; media inline as `data:` URLs), before anything
is reserved: the limit is not waived. Keys under no token limit send them as before.
Everything else a generating endpoint takes is in the body: a Responses `input` and
`instructions` (rendered as chat messages), and tools (rendered by the chat template; vLLM's
/tokenize counts them, tokenize.py).

Requests per minute use a sliding-window estimate over clock minutes (the current
minute's count plus the previous minute's, weighted by how much of it is still inside
the window). Keys under no limit never wait for the store.

When the store cannot be reached, a limited key's request is refused (503): a limit an
operator set is not waived by an outage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmgw.router.openai_errors import RouterError
from llmgw.router.principal import Principal
from llmgw.router.settings import RouterSettings
from llmgw.store import GroupLimit, Refusal, Store

if TYPE_CHECKING:
    from llmgw.router.usage import Clock, UsageRecorder

log = logging.getLogger("llmgw.router")

# Request fields that bound a completion's length: chat, completions, responses, and
# llama.cpp's own (which it reads before max_tokens).
_BUDGET_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens", "n_predict")
# The endpoints that generate, each with the fields an engine reads its budget from there
# (any one present binds it) and the one the router sets when the client sent none.
_GENERATES: dict[str, tuple[tuple[str, ...], str]] = {
    "/v1/chat/completions": (("max_tokens", "max_completion_tokens"), "max_tokens"),
    "/v1/completions": (("max_tokens",), "max_tokens"),
    "/v1/responses": (("max_output_tokens",), "max_output_tokens"),
}
# Request fields that multiply the sequences an engine generates (vLLM's best_of: it
# generates best_of and returns the best n).
_CHOICE_FIELDS = ("n", "best_of")


# Content parts that carry media, with where their URL is (chat: {"type": "image_url",
# "image_url": {"url": ...}}; Responses: {"type": "input_image", "image_url": "..."}).
_MEDIA_PARTS = {"image_url": "image_url", "video_url": "video_url", "audio_url": "audio_url",
                "input_image": "image_url", "input_file": "file_url", "file": "file"}
# Request fields that make the engine prepend what it stored (the Responses API).
_STORED_HISTORY = ("previous_response_id", "conversation")


@dataclass(frozen=True, slots=True)
class Budget:
    """A generating request's completion budget, as reserved and as the engine must see it."""

    tokens: int  # per sequence
    sequences: int  # choices times prompts
    fields: tuple[str, ...]  # the body fields that carry `tokens` to the engine
    # Why the body does not bound the prompt ("": it does); a token limit refuses such a request.
    unbounded: str = ""

    @property
    def total(self) -> int:
        return self.tokens * self.sequences


def prompt_bound(body_bytes: int, settings: RouterSettings) -> int:
    """The most tokens a request's prompt may count, by its body's size."""
    return math.ceil(body_bytes / max(settings.prompt_bytes_per_token, 1e-9))


def _fetched(part: object) -> str:
    """The kind of media a content part makes the engine fetch or look up ("" for none)."""
    if not isinstance(part, dict):
        return ""
    kind = part.get("type")
    where = _MEDIA_PARTS.get(kind) if isinstance(kind, str) else None
    if where is None:
        return ""
    inner = part.get(where)
    fields = inner if isinstance(inner, dict) else part  # chat nests its part's fields, Responses does not
    if fields.get("file_id") is not None:
        return f"a stored file ({kind})"
    ref = inner.get("url") if isinstance(inner, dict) else inner
    if (isinstance(ref, str) and ref.startswith("data:")) or isinstance(fields.get("file_data"), str):
        return ""  # the media itself, inline: its bytes are in the body
    return f"{kind} by URL"


def unbounded_prompt(req: dict[str, Any], path: str) -> str:
    """Why the body of a request to `path` does not bound its prompt, as a phrase; "" when it does."""
    if path == "/v1/responses":
        for field in _STORED_HISTORY:
            if req.get(field) is not None:
                return f"`{field}` (the engine adds the stored conversation)"
        items = req.get("input")
    elif path == "/v1/chat/completions":
        items = req.get("messages")
    else:
        return ""
    for item in items if isinstance(items, list) else ():
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else [item]:
            kind = _fetched(part)
            if kind:
                return kind
    return ""


def _count(req: dict[str, Any], name: str, top: int) -> int | None:
    """`req[name]` as an integer from 1 to `top`; None when absent; else a 400 naming it."""
    value = req.get(name)
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= top:  # not bool, float or string: what the engine reads
        raise RouterError(400, f"`{name}` must be an integer from 1 to {top}, got {json.dumps(value)[:40]}",
                          param=name, code="invalid_value")
    return value


def completion_budget(req: dict[str, Any], path: str, settings: RouterSettings) -> Budget | None:
    """The completion budget of a request to `path` (None: the endpoint generates nothing),
    or a 400 when a budget or count in it is not an integer in range."""
    known = _GENERATES.get(path)
    if known is None:
        return None
    given = {f: v for f in _BUDGET_FIELDS if (v := _count(req, f, settings.max_budget_tokens)) is not None}
    choices = max((v for f in _CHOICE_FIELDS if (v := _count(req, f, settings.max_choices)) is not None), default=1)
    prompt = req.get("prompt") if path == "/v1/completions" else None
    # A batch: several prompts (strings or token lists), each completed on its own.
    prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    fields = tuple(given) if any(f in given for f in known[0]) else (*given, known[1])
    return Budget(min(given.values(), default=settings.default_max_tokens), choices * prompts, fields,
                  unbounded_prompt(req, path))


def reservation(req: dict[str, Any], body_bytes: int, path: str, settings: RouterSettings) -> int:
    """The most tokens this request may cost: prompt (by body size) plus completion budget."""
    budget = completion_budget(req, path, settings)
    return prompt_bound(body_bytes, settings) + (budget.total if budget is not None else 0)


def refusal_error(refusal: Refusal, now: float) -> RouterError:
    if refusal.what == "rpm":
        wait = max(1, 60 - int(now % 60))
        return RouterError(429, f"rate limit reached for group {refusal.group!r}: {refusal.limit} requests per minute",
                           code="rate_limit_exceeded", headers={"Retry-After": str(wait)})
    wait = max(1, 86400 - int(now % 86400))
    return RouterError(429, f"token quota reached for group {refusal.group!r}: {refusal.limit} tokens per day (UTC)",
                       code="insufficient_quota", headers={"Retry-After": str(wait)})


class Quotas:
    """Admission (before a request is routed) and release (when it is done)."""

    def __init__(self, store: Store, recorder: UsageRecorder, clock: Clock, settings: RouterSettings) -> None:
        self.store = store
        self.recorder = recorder
        self.clock = clock
        self.settings = settings
        self.exact_admits = 0  # requests the byte bound refused and the exact count admitted

    async def admit(self, principal: Principal, body_bytes: int, budget: Budget | None,
                    count: Callable[[], Awaitable[int | None]] | None = None) -> str | None:
        """Admit the request or raise 429 (503 if the store is down); returns the
        reservation to hand to `release` when the request is done, if one was made (then
        the engine must be held to `budget`: proxy.py writes it into the body).

        `count` gives the prompt's exact tokens (tokenize.py), or None when the engines
        cannot say; it is called only when the byte bound is what a token limit refuses."""
        if not principal.quotas:
            self.recorder.count_request(principal.key_id, int(time.time() // 60))
            return None
        limits = [q.limit() for q in principal.quotas]
        if budget is not None and budget.unbounded and any(g.tokens_per_day is not None for g in limits):
            raise RouterError(400, f"this key's group has a token limit, and this request's prompt is not all in "
                                   f"its body ({budget.unbounded}), so the router cannot reserve what it costs: "
                                   "send the whole input in the request, media inline as data: URLs",
                              code="prompt_not_in_body")
        total = budget.total if budget is not None else 0
        bound = prompt_bound(body_bytes, self.settings)
        rid, refusal, now = await self._admit(principal, limits, bound, total)
        if refusal is not None and refusal.what == "tokens" and count is not None \
                and self.settings.tokenize_timeout > 0:
            exact = await count()
            if exact is not None and exact < bound:
                # The engines' own count: what the engine will charge, so the prompt still
                # fits and only the completion may pass the limit.
                rid, refusal, now = await self._admit(principal, limits, exact, total)
                if refusal is None:
                    self.exact_admits += 1
                    log.debug("admitted a prompt of %d tokens (%d body bytes) by its exact count", exact, body_bytes)
        if refusal is not None:
            raise refusal_error(refusal, now)
        return rid if any(g.tokens_per_day is not None for g in limits) else None

    async def _admit(self, principal: Principal, limits: list[GroupLimit], prompt: int,
                     completion: int) -> tuple[str, Refusal | None, float]:
        """One admission in the store: the reservation's id, the refusal if any, and when."""
        now = time.time()
        rid = secrets.token_hex(12)
        # This router's unwritten usage goes first, in the same transaction: a request of
        # this key that just finished must not still count as reserved.
        batch = self.recorder.take()
        try:
            refusal = await asyncio.to_thread(
                self.store.admit, principal.key_id, limits, now=now, day=self.clock.day(now),
                reserve=prompt + completion, reservation_id=rid,
                fit=prompt,  # the prompt fits; only the completion may pass
                expires_at=now + self.settings.reservation_ttl, usage=batch)
        except Exception as exc:
            self.recorder.restore(*batch)
            log.warning("cannot check quotas in the store: %s", exc)
            raise RouterError(503, "the router cannot check this key's quota right now; try again shortly",
                              code="quota_unavailable",
                              headers={"Retry-After": str(self.settings.retry_after)}) from None
        return rid, refusal, now

    def release(self, reservation_id: str | None) -> None:
        """The request is done (its usage, if any, was recorded): settle at the next flush."""
        if reservation_id is not None:
            self.recorder.release(reservation_id)
