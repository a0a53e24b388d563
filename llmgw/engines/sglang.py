"""SGLang command lines (pinned in llmgw.engines.versions): `python -m sglang.launch_server`.

`--tp` counts every GPU of the replica, across nodes; the ranks meet at --dist-init-addr,
the leader's port + 10000.
"""

from __future__ import annotations

from llmgw.engines.shard import Layout, Shard


def _base(shard: Shard, layout: Layout) -> list[str]:
    return [layout.venv_python("sglang"), "-m", "sglang.launch_server", "--model-path", shard.model_path,
            "--served-model-name", shard.model, "--host", layout.listen_address, "--port", str(shard.port),
            "--tp", str(shard.gpus_per_node * shard.nodes)]


def single_node(shard: Shard, layout: Layout) -> list[str]:
    return _base(shard, layout) + list(shard.args)


def multi_node(shard: Shard, layout: Layout) -> list[str]:
    return [*_base(shard, layout), "--nnodes", str(shard.nodes), "--node-rank", str(shard.rank),
            "--dist-init-addr", f"{shard.leader}:{shard.init_port}", *shard.args]


def command(shard: Shard, layout: Layout) -> list[str]:
    return multi_node(shard, layout) if shard.multi_node else single_node(shard, layout)
