"""What the key store holds: keys, groups and usage counters, as plain records.

The router and the CLI both speak these types; only `llmgw.store.sql` knows tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

# A group's priority class (router/scheduler.py serves them in this order when queues form).
Priority = Literal["interactive", "batch", "background"]
PRIORITIES: tuple[Priority, ...] = get_args(Priority)


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
    # Admission (router/admission.py); None: inherited from the parent, else the default.
    share: float | None = None  # weight in fair sharing of a model's slots
    priority: Priority | None = None
    may_choose_priority: bool | None = None  # requests may ask for a higher class than the group's


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


@dataclass(frozen=True)
class BenchRecord:
    """One `llmgw bench` run: what was served (from the state) and what was measured.

    `profiles` and `nodes` are comma-joined, sorted: a model with replicas on two profiles
    is benchmarked through the router across both, and the record says so. Latencies in
    milliseconds; None where no request succeeded.
    """

    id: str
    model: str
    profiles: str
    engine: str
    engine_version: str
    nodes: str
    created_at: datetime
    concurrency: int
    requests: int
    errors: int
    prompt_tokens: int  # asked for
    max_tokens: int
    duration_s: float
    output_tokens_per_s: float
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    itl_p50_ms: float | None
    itl_p90_ms: float | None


@dataclass(frozen=True)
class CheckRecord:
    """One capability check of one `llmgw check` run (or of apply's check of a new replica)."""

    run_id: str
    model: str
    capability: str
    status: str  # pass | fail | unsupported
    detail: str
    profiles: str
    engine: str
    engine_version: str
    nodes: str
    created_at: datetime
    replica: str | None = None  # set when the check went to one replica directly (apply)
