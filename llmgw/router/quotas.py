"""Group quotas: requests per minute and tokens per day, admitted in the store.

A request of a key under any limited group is admitted by the store in one
transaction, serialised per group across every router on that store (store/sql.py
`admit`): it checks each limited group in the key's chain, counts the request in its
minute, and for token limits reserves what the request may cost. The reservation is
released with the request's real usage in the next usage flush (usage.py), in the same
transaction that adds the usage, so a group's tokens are always used + reserved.

What a request may cost: its prompt, bounded as one token per `prompt_bytes_per_token`
body bytes (a token is at least one byte of text), plus its completion budget
(`max_tokens`, `max_completion_tokens` or `max_output_tokens`, else
`default_max_tokens`; none for embeddings) times `n` choices. A request is admitted
only if its prompt bound fits under the limit beside what is used and reserved; only
its completion may pass the limit. So however many routers and concurrent requests
there are, a group's tokens end at most one request's completion budget over its limit
(the last one admitted), and embeddings not at all.

Why the body's size and not the engine's tokenizer: admission comes before routing (the
replica may be cold, on demand), each engine counts differently (llama-server's
/tokenize applies no chat template; vLLM's takes messages), and asking an engine costs a
round trip per request that the quota itself would not limit. Bytes are free and never
fewer than the tokens of the text a client sends (a chat template's own few tokens are
covered by the JSON around the text). The cost of the bound is at the end of a day: a
request is refused when the group has less left than its body's bytes, though its
prompt may be a quarter of that in tokens. Each reservation is settled with the
request's real usage (the engine's count) at the next usage flush.

Requests per minute use a sliding-window estimate over clock minutes (the current
minute's count plus the previous minute's, weighted by how much of it is still inside
the window). Keys under no limit never wait for the store.

When the store cannot be reached, a limited key's request is refused (503): a limit an
operator set is not waived by an outage.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from typing import TYPE_CHECKING, Any

from llmgw.router.openai_errors import RouterError
from llmgw.router.settings import RouterSettings
from llmgw.store import GroupLimit, Refusal, Store

if TYPE_CHECKING:
    from llmgw.router.auth import Principal
    from llmgw.router.usage import Clock, UsageRecorder

log = logging.getLogger("llmgw.router")

# Request fields that bound a completion's length, by API (chat, completions, responses).
_BUDGET_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_MAX_CHOICES = 128  # `n` beyond this is the engine's to refuse; the reservation stops growing


class GroupQuota:
    """A group's limits (None: unlimited at this level)."""

    __slots__ = ("name", "rpm", "tokens_per_day")

    def __init__(self, name: str, rpm: int | None, tokens_per_day: int | None) -> None:
        self.name = name
        self.rpm = rpm
        self.tokens_per_day = tokens_per_day

    @property
    def limited(self) -> bool:
        return self.rpm is not None or self.tokens_per_day is not None

    def limit(self) -> GroupLimit:
        return GroupLimit(self.name, self.rpm, self.tokens_per_day)


def prompt_bound(body_bytes: int, settings: RouterSettings) -> int:
    """The most tokens a request's prompt may count, by its body's size."""
    return math.ceil(body_bytes / max(settings.prompt_bytes_per_token, 1e-9))


def reservation(req: dict[str, Any], body_bytes: int, path: str, settings: RouterSettings) -> int:
    """The most tokens this request may cost: prompt (by body size) plus completion budget."""
    prompt = prompt_bound(body_bytes, settings)
    if path.endswith("/embeddings"):
        return prompt
    budget = next((v for v in (req.get(f) for f in _BUDGET_FIELDS)
                   if isinstance(v, int) and not isinstance(v, bool) and v > 0), settings.default_max_tokens)
    n = req.get("n")
    choices = min(n, _MAX_CHOICES) if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
    return prompt + budget * choices


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

    async def admit(self, principal: Principal, req: dict[str, Any], body_bytes: int, path: str) -> str | None:
        """Admit the request or raise 429 (503 if the store is down); returns the
        reservation to hand to `release` when the request is done, if one was made."""
        now = time.time()
        if not principal.quotas:
            self.recorder.count_request(principal.key_id, int(now // 60))
            return None
        rid = secrets.token_hex(12)
        limits = [q.limit() for q in principal.quotas]
        # This router's unwritten usage goes first, in the same transaction: a request of
        # this key that just finished must not still count as reserved.
        batch = self.recorder.take()
        try:
            refusal = await asyncio.to_thread(
                self.store.admit, principal.key_id, limits, now=now, day=self.clock.day(now),
                reserve=reservation(req, body_bytes, path, self.settings), reservation_id=rid,
                fit=prompt_bound(body_bytes, self.settings),  # the prompt fits; only the completion may pass
                expires_at=now + self.settings.reservation_ttl, usage=batch)
        except Exception as exc:
            self.recorder.restore(*batch)
            log.warning("cannot check quotas in the store: %s", exc)
            raise RouterError(503, "the router cannot check this key's quota right now; try again shortly",
                              code="quota_unavailable",
                              headers={"Retry-After": str(self.settings.retry_after)}) from None
        if refusal is not None:
            raise refusal_error(refusal, now)
        return rid if any(g.tokens_per_day is not None for g in limits) else None

    def release(self, reservation_id: str | None) -> None:
        """The request is done (its usage, if any, was recorded): settle at the next flush."""
        if reservation_id is not None:
            self.recorder.release(reservation_id)
