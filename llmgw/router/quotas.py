"""Group quotas: requests per minute and tokens per day, checked without the store.

Each group with a limit has one `GroupQuota` holding three layers of counts: what the
store said at the last sync (every router's flushed counts), what this router is
writing right now, and what it counted since. The sum is the group's usage as far as
this router can know it, at most one flush interval behind the other routers.

Requests per minute use a sliding-window estimate over clock minutes (the current
minute's count plus the previous minute's, weighted by how much of it is still inside
the window), which needs only two counters per group and no per-request timestamps.
Tokens are counted when a response reports its usage, so the request that crosses a
daily limit completes and the next one is refused.
"""

from __future__ import annotations

from llmgw.router.openai_errors import RouterError


class GroupQuota:
    __slots__ = ("_flushing_minutes", "_flushing_tokens", "_pending_minutes", "_pending_tokens",
                 "_shared_day", "_shared_minutes", "_shared_tokens", "name", "rpm", "tokens_per_day")

    def __init__(self, name: str, rpm: int | None, tokens_per_day: int | None) -> None:
        self.name = name
        self.rpm = rpm
        self.tokens_per_day = tokens_per_day
        self._shared_minutes: dict[int, int] = {}
        self._pending_minutes: dict[int, int] = {}
        self._flushing_minutes: dict[int, int] = {}
        self._shared_day = ""
        self._shared_tokens = 0
        self._pending_tokens: dict[str, int] = {}
        self._flushing_tokens: dict[str, int] = {}

    @property
    def limited(self) -> bool:
        return self.rpm is not None or self.tokens_per_day is not None

    def _minute(self, minute: int) -> int:
        return (self._shared_minutes.get(minute, 0) + self._flushing_minutes.get(minute, 0)
                + self._pending_minutes.get(minute, 0))

    def requests_in_window(self, now: float) -> float:
        minute = int(now // 60)
        inside = 1.0 - (now - minute * 60) / 60.0
        return self._minute(minute) + self._minute(minute - 1) * inside

    def tokens_on(self, day: str) -> int:
        shared = self._shared_tokens if self._shared_day == day else 0
        return shared + self._flushing_tokens.get(day, 0) + self._pending_tokens.get(day, 0)

    def refusal(self, now: float, day: str) -> RouterError | None:
        """A 429 if one more request now would exceed a limit, else None."""
        if self.rpm is not None and self.requests_in_window(now) + 1 > self.rpm:
            wait = max(1, 60 - int(now % 60))
            return RouterError(429, f"rate limit reached for group {self.name!r}: "
                                    f"{self.rpm} requests per minute",
                               code="rate_limit_exceeded", headers={"Retry-After": str(wait)})
        if self.tokens_per_day is not None and self.tokens_on(day) >= self.tokens_per_day:
            wait = max(1, 86400 - int(now % 86400))
            return RouterError(429, f"token quota reached for group {self.name!r}: "
                                    f"{self.tokens_per_day} tokens per day (UTC)",
                               code="insufficient_quota", headers={"Retry-After": str(wait)})
        return None

    def add_request(self, minute: int) -> None:
        self._pending_minutes[minute] = self._pending_minutes.get(minute, 0) + 1

    def add_tokens(self, day: str, tokens: int) -> None:
        self._pending_tokens[day] = self._pending_tokens.get(day, 0) + tokens

    # -- sync with the store (the usage loop calls these, never a request) ---------------
    def begin_flush(self) -> None:
        """What was pending is being written now; new counts go to a fresh pending layer."""
        for m, n in self._pending_minutes.items():
            self._flushing_minutes[m] = self._flushing_minutes.get(m, 0) + n
        for d, n in self._pending_tokens.items():
            self._flushing_tokens[d] = self._flushing_tokens.get(d, 0) + n
        self._pending_minutes = {}
        self._pending_tokens = {}

    def abort_flush(self) -> None:
        """The write failed: the counts are pending again, to be written next time."""
        for m, n in self._flushing_minutes.items():
            self._pending_minutes[m] = self._pending_minutes.get(m, 0) + n
        for d, n in self._flushing_tokens.items():
            self._pending_tokens[d] = self._pending_tokens.get(d, 0) + n
        self._flushing_minutes = {}
        self._flushing_tokens = {}

    def end_flush(self, minutes: dict[int, int], day: str, tokens: int, current_minute: int) -> None:
        """The store's totals, which now include what was being written."""
        self._shared_minutes = minutes
        self._shared_day = day
        self._shared_tokens = tokens
        self._flushing_minutes = {}
        self._flushing_tokens = {}
        for m in [m for m in self._pending_minutes if m < current_minute - 1]:
            del self._pending_minutes[m]
        for d in [d for d in self._pending_tokens if d < day]:
            del self._pending_tokens[d]
