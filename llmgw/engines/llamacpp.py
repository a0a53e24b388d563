"""llama.cpp command lines: `llama-server` serves the OpenAI API itself; the workers of a
multi-node replica run `rpc-server`, and rank 0 reaches them with `--rpc`.

llama.cpp's multi-node mode splits the layers across the RPC workers' backends (it is
pipeline-like, over TCP), so every layer is offloaded (`--n-gpu-layers 999`) whenever
there are workers or GPUs.
"""

from __future__ import annotations

from llmgw.engines import flags
from llmgw.engines.descriptor import Engine
from llmgw.engines.shard import Layout, Shard


def _server(shard: Shard, layout: Layout, rpc: list[str]) -> list[str]:
    words = [f"{layout.llamacpp_dir}/llama-server", "--model", shard.model_path, "--alias", shard.model,
             "--host", layout.listen_address, "--port", str(shard.port), "--metrics",
             "--parallel", str(layout.llamacpp_parallel)]
    if rpc:
        words += ["--rpc", ",".join(rpc)]
    if rpc or shard.gpus:
        words += ["--n-gpu-layers", "999"]
    # The adapters in the shard's order: llama-server numbers them 0, 1, ... so, and the router
    # selects one per request by that id (`lora: [{id, scale}]`, llmgw/router/adapters.py). One
    # comma-separated --lora: a repeated one is deprecated (cache paths hold no commas: entry.py).
    if shard.adapters:
        words += ["--lora", ",".join(a.path for a in shard.adapters)]
    return words + list(shard.args)


def single_node(shard: Shard, layout: Layout) -> list[str]:
    """One llama-server on one host (GPUs or CPU)."""
    return _server(shard, layout, [])


def rpc_leader(shard: Shard, layout: Layout) -> list[str]:
    """Rank 0 of a multi-node replica: llama-server, with every worker's rpc-server."""
    if not shard.workers:
        raise ValueError(f"a {shard.nodes}-node llama.cpp replica needs its workers in peers")
    return _server(shard, layout, [str(w) for w in shard.workers])


def rpc_worker(shard: Shard, layout: Layout) -> list[str]:
    """Rank > 0: an rpc-server on the shard's port, bound to the listen address only.

    The catalog's args are llama-server's, not rpc-server's, so none are passed here.
    """
    return [f"{layout.llamacpp_dir}/rpc-server", "--host", layout.listen_address, "--port", str(shard.port)]


def command(shard: Shard, layout: Layout) -> list[str]:
    if shard.trust_remote_code:
        raise ValueError("trust_remote_code: llama.cpp runs no code from the model; the profile must not set it")
    if not shard.multi_node:
        return single_node(shard, layout)
    return rpc_leader(shard, layout) if shard.rank == 0 else rpc_worker(shard, layout)


# The paths llama-server (server.cpp of the build in $LLMGW_CACHE) serves each OpenAI
# endpoint on. It answers a `previous_response_id` with its own 400 (it keeps no
# responses), and serves transcriptions only with an audio model loaded.
ENDPOINTS = {
    "POST /v1/chat/completions": "/v1/chat/completions",
    "POST /v1/completions": "/v1/completions",
    "POST /v1/embeddings": "/v1/embeddings",
    "POST /v1/responses": "/v1/responses",
    "POST /v1/rerank": "/v1/rerank",
    "POST /v1/audio/transcriptions": "/v1/audio/transcriptions",
    "POST /v1/tokenize": "/tokenize",
    "POST /v1/detokenize": "/detokenize",
}

ENGINE = Engine(
    name="llamacpp", title="llama.cpp", command=command, install="binary", distribution=None, version="",
    programs=("llama-server", "rpc-server"),
    flags=flags.LLAMACPP, parser="exact", key="env", key_env="LLAMA_API_KEY", endpoints=ENDPOINTS,
    weight_formats=("gguf",),
    multi_node="tcp",  # rpc-server workers over TCP: CPU hosts too, no fabric
    remote_code=False,  # GGUF weights only: no code from the model to run
    # No pinned GPU build: the operator builds llama-server (with the CUDA toolkit of their
    # choice) and apply copies it, so no nvcc is needed on the host, and the driver it needs is
    # that toolkit's family's (descriptor.MIN_DRIVER): a profile's `requires:` says so.
    gpu_build=None,
    adapters="static",  # --lora at start; its /lora-adapters only rescales those
)
