"""Who is calling, and the limits above them: what authentication hands to quotas.

Its own module so that auth (which makes principals) and quotas (which charges them) each
import it, not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.store import GroupLimit


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
class Principal:
    """An authenticated caller: its key, its group and the limited groups above it."""

    key_id: str
    name: str
    group: str | None
    quotas: tuple[GroupQuota, ...]
