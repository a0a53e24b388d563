"""What the key store holds: keys, groups and usage counters, as plain records.

The router and the CLI both speak these types; only `llmgw.store.sql` knows tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class KeyRecord:
    """An API key as stored: never the key itself, only its SHA-256 and a short prefix."""

    id: str
    name: str
    group: str | None
    prefix: str  # the first characters of the key, so people can tell keys apart
    hash: str
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class GroupRecord:
    """A node in the group tree; a limit of None means unlimited at this level."""

    name: str
    parent: str | None
    rpm: int | None
    tokens_per_day: int | None
    created_at: datetime


@dataclass(frozen=True)
class UsageDelta:
    """Counts to add for one key, model and UTC day (what the router flushes in batches)."""

    key_id: str
    day: str  # YYYY-MM-DD, UTC
    model: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class UsageRow:
    """Accumulated usage of one key on one model for one UTC day."""

    key_id: str
    day: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class MinuteCount:
    """Requests of one key in one clock minute (minutes since the epoch), for shared rpm."""

    key_id: str
    minute: int
    requests: int


@dataclass(frozen=True)
class GroupLimit:
    """A group's limits as a router admits against them (None: no limit of that kind)."""

    name: str
    rpm: int | None
    tokens_per_day: int | None


@dataclass(frozen=True)
class Refusal:
    """Which limit refused a request: `what` is "rpm" or "tokens"."""

    group: str
    what: str
    limit: int
