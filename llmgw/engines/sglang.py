"""SGLang command lines (pinned in llmgw.engines.versions): `python -m sglang.launch_server`.

`--tp` counts every GPU of the replica, across nodes; the ranks meet at --dist-init-addr,
the leader's port + 10000. With an API key (rank 0 serves HTTP), `--config` names the
file holding it.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.engines import flags, versions
from llmgw.engines.descriptor import Engine, GpuBuild
from llmgw.engines.flags import Device, int_value
from llmgw.engines.shard import Layout, Shard


def _base(shard: Shard, layout: Layout) -> list[str]:
    words = [layout.venv_python("sglang"), "-m", "sglang.launch_server", "--model-path", shard.model_path,
             "--served-model-name", shard.model, "--host", layout.listen_address, "--port", str(shard.port),
             "--tp", str(shard.gpus_per_node * shard.nodes)]
    # SGLang reads its API key only as an option (no environment variable): from a YAML file
    # of options the role writes (`api-key: ...`, readable by the engine's group only), so
    # the key is on no command line. SGLang merges the file's options under the command's,
    # each key as `--<key>` as written: `api_key` would be refused (seen with 0.5.23).
    if shard.key_config:
        words += ["--config", shard.key_config]
    if shard.trust_remote_code:
        words.append("--trust-remote-code")
    if shard.adapters:  # LoRA adapters from start, each under its own name; all may share a batch
        words += ["--enable-lora", "--lora-paths", *(f"{a.name}={a.path}" for a in shard.adapters),
                  "--max-loras-per-batch", str(len(shard.adapters))]
        ranks = [a.rank for a in shard.adapters if a.rank is not None]
        if ranks:
            words += ["--max-lora-rank", str(max(ranks))]
    return words


def single_node(shard: Shard, layout: Layout) -> list[str]:
    return _base(shard, layout) + list(shard.args)


def multi_node(shard: Shard, layout: Layout) -> list[str]:
    return [*_base(shard, layout), "--nnodes", str(shard.nodes), "--node-rank", str(shard.rank),
            "--dist-init-addr", f"{shard.leader}:{shard.init_port}", *shard.args]


def command(shard: Shard, layout: Layout) -> list[str]:
    return multi_node(shard, layout) if shard.multi_node else single_node(shard, layout)


# The paths SGLang's HTTP server (the pinned version) serves each OpenAI endpoint on
# (tests/router/test_engine_routes.py reads its route decorators). No DELETE of a
# response, no audio translations.
ENDPOINTS = {
    "POST /v1/chat/completions": "/v1/chat/completions",
    "POST /v1/completions": "/v1/completions",
    "POST /v1/embeddings": "/v1/embeddings",
    "POST /v1/responses": "/v1/responses",
    "GET /v1/responses/{id}": "/v1/responses/{id}",
    "POST /v1/responses/{id}/cancel": "/v1/responses/{id}/cancel",
    "POST /v1/rerank": "/v1/rerank",
    "POST /v1/score": "/v1/score",
    "POST /v1/audio/transcriptions": "/v1/audio/transcriptions",
    "POST /v1/tokenize": "/v1/tokenize",
    "POST /v1/detokenize": "/v1/detokenize",
}

def max_running(args: Sequence[str], gpus: int, nodes: int, device: Device | None) -> int | None:
    """Requests a replica runs at once (llmgw.engines.max_running): `--max-running-requests`
    when the catalog sets it. Its default in 0.5.23 is sized from the KV cache the engine finds
    room for once the weights are loaded (sglang/srt/mem_cache/kv_cache_configurator.py,
    `resolve_max_num_reqs`: cache tokens / context length x 512, within 2048..4096, and at
    most half the cache tokens, which caps a set value too), so nothing before the start can
    say it: None."""
    return int_value(args, "--max-running-requests")


ENGINE = Engine(
    name="sglang", title="SGLang", command=command, install="venv",
    distribution=("sglang[all]", "sglang[all]"), version=versions.SGLANG, programs=(),
    flags=flags.SGLANG, parser="argparse",
    # Options that are a prefix of a refused one but tune (`--quantization` is not
    # `--quantization-param-path`): tests/engines/test_owned_flags.py finds each.
    tuning_prefixes=frozenset({"--export-metrics-to-file", "--log-requests", "--quantization"}),
    # SGLang reads its key only as an option: from the YAML file of options `--config` names.
    key="config", key_env="", endpoints=ENDPOINTS, weight_formats=("safetensors", "pytorch"),
    multi_node="fabric", remote_code=True,
    gpu_build=GpuBuild("wheel", versions.SGLANG_CUDA),  # torch's and sgl-kernel's CUDA (versions.py)
    adapters="runtime",  # LoRA: --lora-paths at start, /load_lora_adapter while serving
    max_running=max_running,
)
