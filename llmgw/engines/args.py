"""Values of a catalog's engine args, read as the engines' parsers read them.

The spellings llmgw reads: `--flag N` and `--flag=N` (and for vLLM `--flag_name`, which its
parser turns into `--flag-name`: the caller names both); the last occurrence wins, as in both
Python engines' parsers. A value that is not a positive integer gives none (the engine refuses
such a command line itself when it starts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Device:
    """What an engine's defaults read of a shard's first GPU (host facts): NVML's name and memory."""

    name: str
    memory_mib: int | None


def arg_value(args: Sequence[str], *names: str) -> str | None:
    """The value of the last `--name VALUE` or `--name=VALUE` in `args` for any of `names`."""
    found: str | None = None
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag in names:
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def int_value(args: Sequence[str], *names: str) -> int | None:
    """`arg_value` as a positive integer; None when absent or not one."""
    text = arg_value(args, *names)
    if text is None or not (text.isascii() and text.isdigit()):
        return None
    n = int(text)
    return n if n >= 1 else None
