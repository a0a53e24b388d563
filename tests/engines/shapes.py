"""Every shape of shard the planner can hand an engine, per engine: one GPU (or a CPU),
tensor parallel on one host, and each rank of two- and three-node replicas, each with
and without catalog args. tests/engines feeds all of them to the engines' own parsers.
"""

from __future__ import annotations

import dataclasses

from llmgw.engines import Layout, Peer, Shard, ShardAdapter, command

LAYOUT = Layout(install_dir="/opt/llmgw/engines", llamacpp_dir="/opt/llmgw/engines/llamacpp/0123456789abcdef",
                listen_address="10.0.0.1", llamacpp_parallel=4)
LEADER = "10.0.0.1"
MODEL = "/var/cache/llmgw/0123abcd-tiny"
# SGLang's serving shard (rank 0) reads its API key from this file of options (--config).
KEY_CONFIG = "/etc/llmgw/engine-keys/llmgw-tiny-1-0.yaml"
# Two LoRA adapters loaded at start (docs/adapters.md), one of a known rank.
ADAPTERS = (ShardAdapter("tiny-sql", "/var/cache/llmgw/4567cdef-tiny-sql", 8),
            ShardAdapter("tiny-poet", "/var/cache/llmgw/89abef01-tiny-poet"))


def _key(engine: str, rank: int) -> str:
    return KEY_CONFIG if engine == "sglang" and rank == 0 else ""


def _peers(n: int) -> tuple[Peer, ...]:
    return tuple(Peer(f"10.0.0.{i + 1}", 20000 + i) for i in range(n))


def shards(engine: str, args: tuple[str, ...] = ()) -> dict[str, Shard]:
    """Name -> shard, for every shape of `engine`."""
    base = {"engine": engine, "model": "tiny", "model_path": MODEL, "args": args}
    key = _key(engine, 0)
    out = {"cpu": Shard(port=20000, **base), "one-gpu": Shard(port=20000, gpus=(0,), key_config=key, **base),
           "tp4": Shard(port=20000, gpus=(0, 1, 2, 3), key_config=key, **base)}
    for nodes in (2, 3):
        for rank in range(nodes):
            out[f"{nodes}-nodes-rank-{rank}"] = Shard(
                port=20000 + rank, gpus=(0, 1, 2, 3) if engine != "llamacpp" else (), rank=rank, nodes=nodes,
                leader=LEADER, peers=_peers(nodes), key_config=_key(engine, rank), **base)
    for name in ("cpu", "one-gpu", "2-nodes-rank-0", "2-nodes-rank-1"):  # with LoRA adapters
        out[f"{name} +adapters"] = dataclasses.replace(out[name], adapters=ADAPTERS)
    if engine == "vllm":  # loaded at run time (adapter_loading: runtime): none at start, room for one
        out["one-gpu +runtime-adapters"] = dataclasses.replace(out["one-gpu"], adapters=ADAPTERS, max_loras=1)
    return out


def command_lines(engine: str, args: tuple[str, ...] = ()) -> dict[str, list[str]]:
    return {name: command(s, LAYOUT) for name, s in shards(engine, args).items()}


# Catalog args a profile might carry (inventories/example's kind), parsed alongside.
CATALOG_ARGS = {
    "llamacpp": ("--ctx-size", "2048", "--flash-attn", "on"),
    "vllm": ("--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--dtype", "bfloat16"),
    "sglang": ("--context-length", "4096", "--mem-fraction-static", "0.85"),
}


def profile_shards(engine: str, gpus: int, nodes: int, args: tuple[str, ...],
                   trust_remote_code: bool = False) -> list[Shard]:
    """Every rank of one catalog profile's replica, as apply would hand them to the role."""
    peers = _peers(nodes) if nodes > 1 else ()
    return [Shard(engine=engine, model="m", model_path=MODEL, port=20000 + rank, gpus=tuple(range(gpus)),
                  args=args, rank=rank, nodes=nodes, leader=LEADER if nodes > 1 else "", peers=peers,
                  key_config=_key(engine, rank), trust_remote_code=trust_remote_code)
            for rank in range(nodes)]
