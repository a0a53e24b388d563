"""Node states that end with time: a drain's deadline, and a node that stopped answering.

A drain (`llmgw drain NODE --deadline 1h`) records the moment it gives up waiting for room
elsewhere as `llmgw_drain_deadline` beside `llmgw_node_state: draining`, an absolute UTC time
(so every plan, by whoever makes it, reads the same deadline). A node whose facts have been
stale (a gathering could not reach it) for `unreachable_after` is unreachable: nothing new
goes there; after `lost_after` it is lost: its replicas are replaced elsewhere and removed
from the state without contacting it. Both intervals count from `stale_since`, the first
gathering that missed the host: facts that are merely old say nothing about the host.

Every function here takes "now" from its caller: the planner is pure, and tests pin times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from llmgw.catalog import format_duration, parse_duration
from llmgw.facts import HostFacts

DRAIN_DEADLINE_VAR = "llmgw_drain_deadline"
DEFAULT_DRAIN_DEADLINE = "1h"  # `llmgw drain` without --deadline; the command prints the time it sets
TIME_EXAMPLE = "2026-01-31T18:00:00Z"


def format_time(t: datetime) -> str:
    """A UTC time as the inventory and the plan write it: 2026-01-31T18:00:00Z."""
    return t.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_deadline(value: object) -> datetime:
    """A drain deadline written in the inventory: an ISO 8601 time with its zone (UTC: `Z`).

    Raises ValueError saying what to write instead. A time without a zone is refused: the
    controller and the operator's laptop would read it in different zones."""
    if isinstance(value, datetime):
        t = value
    elif isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not a time; write it in UTC like {TIME_EXAMPLE}") from None
    else:
        raise ValueError(f"{value!r} is not a time; write it in UTC like {TIME_EXAMPLE} (quoted)")
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{value!r} has no time zone; write it in UTC like {TIME_EXAMPLE}")
    return t.astimezone(UTC)


def deadline_after(duration: str, now: datetime) -> datetime:
    """`now` plus a duration such as 30m, 1h or 90s (ValueError for anything else, or 0)."""
    seconds = parse_duration(duration)
    if seconds <= 0:
        raise ValueError(f"{duration!r} is no time at all; give the drain at least a few seconds, like 10m")
    return (now + timedelta(seconds=seconds)).astimezone(UTC).replace(microsecond=0)


Condition = Literal["unreachable", "lost"]


@dataclass(frozen=True)
class Liveness:
    """A node that stopped answering: since when, and when it is (or was) counted lost."""

    condition: Condition
    since: datetime  # the first gathering that missed it (facts' stale_since)
    lost_at: datetime
    why: str  # the gathering's reason ("unreachable: ssh: connect ... timed out"), or ""

    def sentence(self, node: str) -> str:
        why = f" ({self.why})" if self.why else ""
        if self.condition == "lost":
            return (f"{node} is lost: no gathering has reached it since {format_time(self.since)}{why}, "
                    f"lost since {format_time(self.lost_at)}")
        return (f"{node} is unreachable: no gathering has reached it since {format_time(self.since)}{why}; "
                f"it counts as lost at {format_time(self.lost_at)}")


def liveness(facts: HostFacts | None, now: datetime | None, unreachable_after: int,
             lost_after: int) -> Liveness | None:
    """Whether a node counts as unreachable or lost at `now`; None when it answers (or no clock
    is given, or nothing is known of it yet: a node never gathered is 'no facts', not dead)."""
    if facts is None or facts.stale_since is None or now is None:
        return None
    since = facts.stale_since.astimezone(UTC)
    lost_at = since + timedelta(seconds=lost_after)
    age = (now - since).total_seconds()
    if age >= lost_after:
        return Liveness("lost", since, lost_at, facts.stale_reason or "")
    if age >= unreachable_after:
        return Liveness("unreachable", since, lost_at, facts.stale_reason or "")
    return None


def check_intervals(unreachable_after: int, lost_after: int) -> str | None:
    """Why these two llmgw.yaml intervals do not go together, or None."""
    if lost_after <= unreachable_after:
        return (f"lost_after ({format_duration(lost_after)}) must be longer than unreachable_after "
                f"({format_duration(unreachable_after)}): a node is unreachable first, then lost")
    return None
