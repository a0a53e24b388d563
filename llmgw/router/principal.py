"""Who is calling, and the limits above them: what authentication hands to quotas.

Its own module so that auth (which makes principals) and quotas (which charges them) each
import it, not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.store import GroupLimit
from llmgw.store.model import Priority

# Fair sharing and priority classes (scheduler.py); the defaults of a key whose groups set none.
DEFAULT_SHARE = 1.0
DEFAULT_PRIORITY: Priority = "interactive"
UNGROUPED = "-"  # the fair-share group of keys without a group: they share one


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


@dataclass(frozen=True, slots=True)
class Tenancy:
    """What admission needs of a caller: the group it shares by, its weight, its class,
    and whether its requests may ask for a higher class than the group's."""

    group: str = UNGROUPED
    share: float = DEFAULT_SHARE
    priority: Priority = DEFAULT_PRIORITY
    may_choose: bool = False


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its key, its group and the limited groups above it."""

    key_id: str
    name: str
    group: str | None
    quotas: tuple[GroupQuota, ...]
    tenancy: Tenancy = Tenancy()
