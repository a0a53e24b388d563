"""Facts: what each host has, as gathered by Ansible and kept in the site's facts cache.

Reading inputs (llmgw.inventory, llmgw.facts.cache) memoises on a bastion: parsing a 4,096-host
fleet costs seconds, and its files rarely change between two plans. The memo (llmgw.facts.memo)
unpickles what it stored, code the router process must never hold (#34), so the readers ask
`memo_in_use()`: None, and every input parsed, until the bastion's CLI calls `use_memo`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from llmgw.facts.records import TOPOLOGY_LEVELS, Filesystem, Gpu, HostFacts, IbAdapter, IbPort, Unit, Weights

__all__ = ["TOPOLOGY_LEVELS", "Filesystem", "Gpu", "HostFacts", "IbAdapter", "IbPort", "Memo", "Unit", "Weights",
           "memo_in_use", "use_memo"]


class Memo(Protocol):
    """What a reader asks of a memo (llmgw.facts.memo is one)."""

    def load(self, kind: str, where: Path, key: object) -> Any | None: ...

    def store(self, kind: str, where: Path, key: object, value: object) -> None: ...

    def code_version(self, modules: Iterable[str]) -> tuple[object, ...]: ...


_memo: Memo | None = None


def use_memo(memo: Memo | None) -> None:
    """Let this process's input readers memoise in `memo` (None: parse every time again)."""
    global _memo
    _memo = memo


def memo_in_use() -> Memo | None:
    return _memo
