"""What a catalog may not put in an engine's `args` or `env`: the one source of those lists.

Catalog args come after llmgw's own flags on the command line, and every engine keeps the
last occurrence of a flag, so a catalog that could repeat `--host` or `--api-key` would
re-set what llmgw owns. A catalog arg is refused when the engine's own parser would read
it as one of these options, in every spelling that parser accepts:

- vLLM (`FlexibleArgumentParser`) and SGLang (`argparse`): `--flag value`, `--flag=value`,
  unique prefixes (`allow_abbrev` is on in both pinned parsers: `--trust-rem` is
  `--trust-remote-code`), short aliases (`-tp`), `--no-` negations, and for vLLM
  `--flag_name` (it turns underscores into dashes) and `--flag.key value` (a key of a
  JSON option). tests/engines/test_owned_flags.py proves, with the pinned parsers, that
  every spelling of every option listed here maps to an option listed here.
- llama.cpp (`llama-server`): exact words only (no prefixes, no `=`), every alias its
  `--help` lists (tests/engines check the built binary's help).

Two kinds of option: OWNED (llmgw sets them: where the engine listens, its key, the model,
its parallelism and distributed init, its config files) and TRUST (they widen what the
engine trusts: code or files from outside the weights). `trust_remote_code: true` in a
profile is the reviewable way to the one trust option operators need.

The environment (`env:`): an allow-list of prefixes engines read, minus names llmgw sets
and names that load code or files, name credentials, or stand for an owned flag
(llama.cpp reads every option from `LLAMA_ARG_*`). See SECURITY.md for why an allow-list.

Used by `catalog validate` (llmgw.catalog.schema) and the llmgw_engine role's preflight
(its filter plugin), so both refuse the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llmgw.engines.descriptor import find, get

OWNED = "owned"
TRUST = "trust"


def table(**groups: tuple[str, Sequence[str]]) -> dict[str, tuple[str, str]]:
    """option string -> (kind, what it is), from groups of spellings of one option each."""
    out: dict[str, tuple[str, str]] = {}
    for label, (kind, spellings) in groups.items():
        for s in spellings:
            out[s] = (kind, label.replace("_", " "))
    return out


# vLLM 0.32.0 (make_arg_parser): every option string of each refused destination.
VLLM = table(
    listen_address=(OWNED, ["--host", "--uds", "--port", "--grpc", "--grpc-port", "--root-path",
                            "--data-parallel-supervisor-port"]),
    api_key=(OWNED, ["--api-key"]),
    model_path=(OWNED, ["--model", "--hf-token"]),
    served_name=(OWNED, ["--served-model-name"]),
    parallelism=(OWNED, ["--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
                         "--decode-context-parallel-size", "-dcp", "--prefill-context-parallel-size", "-pcp",
                         "--data-parallel-size", "-dp", "--data-parallel-rank", "-dpn",
                         "--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
                         "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp",
                         "--data-parallel-backend", "-dpb", "--data-parallel-hybrid-lb", "-dph",
                         "--no-data-parallel-hybrid-lb", "--data-parallel-external-lb", "-dpe",
                         "--no-data-parallel-external-lb", "--data-parallel-multi-port-external-lb", "-dpm",
                         "--api-server-count", "-asc", "--distributed-executor-backend"]),
    distributed_init=(OWNED, ["--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port",
                              "--headless"]),
    config_file=(OWNED, ["--config"]),
    remote_code=(TRUST, ["--trust-remote-code", "--no-trust-remote-code"]),
    files_outside_the_weights=(TRUST, [
        "--allowed-local-media-path", "--allowed-media-domains", "--download-dir", "--tokenizer",
        "--chat-template", "--lora-modules", "--default-mm-loras", "--hf-config-path", "--speculative-config",
        "-sc", "--spec-model", "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--log-config-file",
        "--logging-config", "--load-format", "--model-loader-extra-config", "--hf-overrides", "--generation-config",
        "--mm-processor-kwargs", "--mm-encoder-fp8-scale-path", "--mm-encoder-fp8-scale-save-path",
        "--profiler-config", "--weight-transfer-config", "--otlp-traces-endpoint", "--tool-server"]),
    code_by_name=(TRUST, ["--middleware", "--worker-cls", "--worker-extension-cls", "--scheduler-cls",
                          "--logits-processors", "--model-class-overrides", "--io-processor-plugin",
                          "--tool-parser-plugin", "--reasoning-parser-plugin", "--kv-transfer-config",
                          "--kv-events-config", "--ec-transfer-config"]),
    templates_from_requests=(TRUST, ["--trust-request-chat-template", "--no-trust-request-chat-template",
                                     "--trust-request-mm-kwargs", "--no-trust-request-mm-kwargs"]),
)

# SGLang 0.5.23 (ServerArgs.add_cli_args; `--tp`, as llmgw writes it, is a prefix of `--tp-size`).
SGLANG = table(
    listen_address=(OWNED, ["--host", "--port", "--fastapi-root-path", "--grpc-mode", "--smg-grpc-mode", "--grpc-port",
                            "--smg-http-sidecar-port", "--grpc-http-sidecar-port", "--gated-launch-port",
                            "--disaggregation-bootstrap-port", "--engine-info-bootstrap-port",
                            "--encoder-bootstrap-port", "--enable-http-worker-reuseport",
                            "--decoupled-spec-bind-endpoint", "--decoupled-spec-connect-endpoints",
                            "--load-publish-endpoint"]),
    api_key=(OWNED, ["--api-key", "--admin-api-key"]),
    model_path=(OWNED, ["--model-path", "--model"]),
    served_name=(OWNED, ["--served-model-name"]),
    parallelism=(OWNED, ["--tensor-parallel-size", "--tp-size", "--pipeline-parallel-size", "--pp-size",
                         "--data-parallel-size", "--dp-size", "--decode-context-parallel-size", "--dcp-size",
                         "--attention-data-parallel-size", "--attn-dp-size", "--attention-context-parallel-size",
                         "--attn-cp-size", "--moe-data-parallel-size", "--moe-dp-size", "--nccl-port",
                         "--use-ray"]),
    distributed_init=(OWNED, ["--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr"]),
    config_file=(OWNED, ["--config"]),
    remote_code=(TRUST, ["--trust-remote-code"]),
    files_outside_the_weights=(TRUST, [
        "--tokenizer-path", "--download-dir", "--chat-template", "--completion-template", "--file-storage-path",
        "--lora-paths", "--uno-lora-path", "--speculative-draft-model-path", "--speculative-draft-model",
        "--speculative-dspark-sps-table-path", "--speculative-dspark-confidence-sts-path",
        "--speculative-token-map", "--speculative-ngram-external-corpus-path", "--spec-trace-dir",
        "--crash-dump-folder", "--export-metrics-to-file-dir", "--quantization-param-path",
        "--modelopt-checkpoint-restore-path", "--modelopt-checkpoint-save-path", "--modelopt-export-path",
        "--load-format", "--model-loader-extra-config", "--json-model-override-args", "--preferred-sampling-params",
        "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-keyfile-password", "--tool-server",
        "--otlp-traces-endpoint", "--kv-events-config", "--log-requests-target", "--lmcache-config-file",
        "--flexkv-config-file", "--pdmux-config-path", "--decrypted-config-file", "--decrypted-draft-config-file",
        "--kt-weight-path", "--debug-tensor-dump-output-folder", "--debug-tensor-dump-input-file",
        "--ple-offload-dir", "--msprobe-dump-config", "--encoder-urls", "--encoder-register-urls",
        "--modelexpress-config", "--remote-instance-weight-loader-seed-instance-ip",
        "--remote-instance-weight-loader-seed-instance-service-port",
        "--remote-instance-weight-loader-send-weights-group-ports", "--remote-instance-weight-loader-backend",
        "--remote-instance-weight-loader-start-seed-via-transfer-engine"]),
    code_by_name=(TRUST, ["--custom-weight-loader", "--forward-hooks", "--model-config-parser", "--sidecar",
                          "--sidecar-args"]),
    templates_from_requests=(TRUST, ["--trust-request-chat-template", "--enable-custom-logit-processor",
                                     "--trust-mm-content-hashes"]),
)

# llama.cpp's llama-server (the pinned build's --help lists each alias; llama.cpp also reads
# every option from a LLAMA_ARG_* variable, refused in env below).
LLAMACPP = table(
    listen_address=(OWNED, ["--host", "--port", "--reuse-port", "--api-prefix"]),
    api_key=(OWNED, ["--api-key", "--api-key-file"]),
    model_path=(OWNED, ["-m", "--model", "-mu", "--model-url", "-dr", "--docker-repo", "-hf", "-hfr", "--hf-repo",
                        "-hff", "--hf-file", "-hft", "--hf-token", "--embd-gemma-default", "--fim-qwen-1.5b-default",
                        "--fim-qwen-3b-default", "--fim-qwen-7b-default", "--fim-qwen-7b-spec",
                        "--fim-qwen-14b-spec", "--fim-qwen-30b-default", "--gpt-oss-20b-default",
                        "--gpt-oss-120b-default", "--vision-gemma-4b-default", "--vision-gemma-12b-default",
                        "--spec-default"]),
    served_name=(OWNED, ["-a", "--alias"]),
    parallelism=(OWNED, ["-np", "--parallel", "--rpc", "-ngl", "--gpu-layers", "--n-gpu-layers"]),
    files_outside_the_weights=(TRUST, [
        "--path", "--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled", "--chat-template-file",
        "--spec-draft-model", "-md", "--model-draft", "--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft",
        "-mm", "--mmproj", "-mmu", "--mmproj-url", "--ssl-key-file", "--ssl-cert-file", "--slot-save-path",
        "--log-file", "--log-prompts-dir", "--grammar-file", "-jf", "--json-schema-file", "-lcs",
        "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic", "--models-dir", "--models-preset",
        "--media-path", "--props", "--ui-config-file", "--webui-config-file", "--mcp-servers-config",
        "--mcp-servers-json"]),
    code_and_tools=(TRUST, ["--tools", "--tools-runtime", "--video-ffmpeg-dir", "-ag", "--agent", "-no-ag",
                            "--no-agent", "--ui-mcp-proxy", "--webui-mcp-proxy", "--no-ui-mcp-proxy",
                            "--no-webui-mcp-proxy"]),
)

_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")  # a value (`--temperature -1`), never an option


def owned_flag(engine: str, word: str) -> str | None:
    """The refused option `word` is a spelling of on `engine`'s parser, or None."""
    e = get(engine)
    refused = e.flags
    if not word.startswith("-") or _NUMBER.match(word):
        return None
    if word in refused:
        return word
    if e.parser == "exact":
        return None
    name = word.split("=", 1)[0]
    if name.startswith("--") and e.parser == "flexible":  # `--a_b` is `--a-b`, `--a.key` of `--a`
        name = name.replace("_", "-").split(".", 1)[0]
    if name in refused:
        return name
    if name in e.tuning_prefixes:
        return None
    if name.startswith("--"):
        # argparse's allow_abbrev: any prefix may name an option; refusing every prefix of a
        # refused one is what makes `--trust-rem` (and `--tr`, ambiguous, refused by the
        # parser anyway) safe without the engine's whole option list.
        hits = sorted(o for o in refused if o.startswith(name) and len(name) > 2)
        return hits[0] if hits else None
    # One dash: argparse matches `-O3` as `-O` with `3`, and a prefix of `-tp` as `-tp`.
    if name[:2] in refused:
        return name[:2]
    hits = sorted(o for o in refused if o.startswith(name) and not o.startswith("--"))
    return hits[0] if hits else None


_OWNED_FROM = {"parallelism": "from the profile's gpus and nodes", "distributed init": "from the plan's shards",
               "api key": "a secret of its own, on no command line", "served name": "the model's name",
               "model path": "the weights apply fetched"}


@dataclass(frozen=True)
class Refusal:
    index: int  # of the word in args
    message: str


def check_args(engine: str, args: Sequence[str]) -> list[Refusal]:
    """Every catalog arg the engine would read as an option llmgw owns or that widens trust."""
    found = find(engine)
    if found is None:
        return []
    out: list[Refusal] = []
    for i, word in enumerate(args):
        if word in ("-", "--"):
            out.append(Refusal(i, f"{word!r} is refused in args: it ends the engine's options (what follows "
                                  "would be read as the model): remove it"))
            continue
        flag = owned_flag(engine, word)
        if flag is None:
            continue
        kind, what = found.flags[flag]
        if kind == OWNED:
            hint = f"llmgw sets the engine's {what} itself ({_OWNED_FROM.get(what, 'from the plan')}): remove it"
        elif what == "remote code":
            hint = "set `trust_remote_code: true` in the profile instead, where review and the plan show it"
        else:
            hint = f"it widens what the engine trusts ({what}): remove it"
        spelled = "" if word.split("=", 1)[0] == flag else f" (read by {engine} as {flag})"
        out.append(Refusal(i, f"{word!r}{spelled} is refused in args: {hint}"))
    return out


# -- the environment -----------------------------------------------------------------------

ENV_PREFIXES = ("VLLM_", "SGLANG_", "NCCL_", "CUDA_", "OMP_", "MKL_", "LLAMA_", "PYTORCH_", "TORCH_", "GGML_",
                "TOKENIZERS_")
"""What an engine legitimately reads from its environment to tune itself. Anything else
(LD_PRELOAD, PYTHONPATH, PATH, HOME, proxies, OPENSSL_CONF, HF_TOKEN...) is refused."""

ENV_OWNED = frozenset({"CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "VLLM_API_KEY",
                       "LLAMA_API_KEY", "SGLANG_LOGGING_CONFIG_PATH", "VLLM_HOST_IP", "VLLM_PORT",
                       "VLLM_PLUGINS", "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_INSECURE_SERIALIZATION",
                       "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_USE_MODELSCOPE", "SGLANG_USE_MODELSCOPE",
                       "VLLM_CONFIGURE_LOGGING", "VLLM_ALLOW_REMOTE_CODE"})
"""Names inside those prefixes that llmgw sets (the GPUs, the fabric, the key, logging) or
that turn on code loading, dev endpoints, pickles, other hubs."""

# Within the prefixes: names with a word that points at a file, a folder, a plugin, an
# address or a credential (`NCCL_NET_PLUGIN`, `VLLM_CACHE_ROOT`, `CUDA_HOME`).
_ENV_WORDS = frozenset({
    "PATH", "PATHS", "DIR", "DIRS", "DIRECTORY", "FOLDER", "FILE", "FILES", "ROOT", "HOME", "PLUGIN", "PLUGINS",
    "MODULE", "MODULES", "LIB", "LIBRARY", "PRELOAD", "CONFIG", "HOST", "PORT", "ADDR", "ADDRESS", "URL", "URI",
    "ENDPOINT", "SOCKET", "KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "CERT", "CA"})


def check_env_name(name: str) -> str | None:
    """Why `name` may not be set from the catalog, or None."""
    if name in ENV_OWNED:
        return f"{name} is set by llmgw (or turns on what llmgw keeps off): remove it"
    if not name.startswith(ENV_PREFIXES):
        return (f"{name} is not an engine tuning variable; the catalog may set only names starting with "
                f"{', '.join(ENV_PREFIXES)} (the loader, the interpreter, proxies and credentials stay llmgw's)")
    if name.startswith("LLAMA_ARG_"):
        return f"{name} is a llama-server option by another name: put the option in args, where it is checked"
    word = next((w for w in name.split("_") if w in _ENV_WORDS), None)
    if word:
        return (f"{name} has the word {word}: files, code, addresses and credentials stay llmgw's, "
                "remove it")
    return None


# -- values of a catalog's args (llmgw.engines.max_running reads them) ---------------------
# Read as the Python engines' parsers read the spellings llmgw documents: `--flag N` and
# `--flag=N` (vLLM's `--flag_name` too: its caller turns underscores into dashes first); the
# last occurrence wins, as in both parsers. A value that is not a positive integer gives none
# (the engine refuses such a command line itself when it starts).
@dataclass(frozen=True, slots=True)
class Device:
    """What an engine's defaults read of a shard's first GPU (host facts): NVML's name and memory."""

    name: str
    memory_mib: int | None


def arg_value(args: Sequence[str], *names: str) -> str | None:
    """The value of the last `--name VALUE` or `--name=VALUE` in `args` for any of `names`."""
    found: str | None = None
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag in names:
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def int_value(args: Sequence[str], *names: str) -> int | None:
    """`arg_value` as a positive integer; None when absent or not one."""
    text = arg_value(args, *names)
    if text is None or not (text.isascii() and text.isdigit()):
        return None
    n = int(text)
    return n if n >= 1 else None
