"""Engine command lines, built in typed Python: one module per engine, one function per
shape (single node, multi-node ranks). The llmgw_engine role's unit template only quotes
the words `command` returns (through the role's `llmgw_engine_command` filter), and the
tests feed every shape to the engines' own argument parsers.
"""

from __future__ import annotations

from collections.abc import Callable

from llmgw.engines import llamacpp, sglang, vllm
from llmgw.engines.shard import INIT_PORT_OFFSET, Layout, Shard

ENGINES: dict[str, Callable[[Shard, Layout], list[str]]] = {
    "llamacpp": llamacpp.command, "vllm": vllm.command, "sglang": sglang.command}


def command(shard: Shard, layout: Layout) -> list[str]:
    """The shard's ExecStart, word by word (the binary first)."""
    try:
        build = ENGINES[shard.engine]
    except KeyError:
        raise ValueError(f"unknown engine {shard.engine!r} (known: {', '.join(sorted(ENGINES))})") from None
    return build(shard, layout)


__all__ = ["ENGINES", "INIT_PORT_OFFSET", "Layout", "Shard", "command"]
