"""LoRA adapters on vLLM (its CPU build, from the parser venv scripts/build-engine-venvs makes):
the command line llmgw builds for a shard with two tiny PEFT adapters (scripts/make_tiny_peft_lora.py)
starts vLLM, and through the router each adapter name answers as vLLM's own adapter of that
name does, differently from the base; `/v1/models` lists them with their parent.

One vLLM start (about a minute on a quiet machine, several on a busy one; about 3 GB)."""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from llmgw.state import AdapterRecord, LoadedAdapter
from llmgw.store import Store
from tests.support.router import CLIENTS, FAST, RunningRouter, StateFile, model, replica
from tests.support.vllm import adapter_shard, serve_vllm, tiny, vllm  # noqa: F401 (the fixtures, shared there)

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0, "seed": 7}


def _engine_models(endpoint: str) -> set[str]:
    return {m["id"] for m in httpx.get(endpoint + "/v1/models", timeout=30).json()["data"]}


def _loads(metrics_text: str) -> dict[tuple[str, str], float]:
    """llmgw_adapter_loads_total by (adapter, event), from the router's /metrics."""
    found = re.findall(r'^llmgw_adapter_loads_total\{adapter="([^"]+)",event="([^"]+)"\} ([0-9.e+]+)$',
                       metrics_text, re.M)
    return {(a, e): float(n) for a, e, n in found}


def test_runtime_loading_loads_on_first_use_and_evicts_past_max_loras(
        tiny: Path, state: StateFile, start_router: Callable[..., RunningRouter],  # noqa: F811
        sqlite_store: Store) -> None:
    """max_loras 1, two adapters: the router loads each on first use (once, under concurrent first
    requests), the second evicts the first, and each answers as vLLM serves it; no client request fails."""
    # Before the test of adapters loaded at start: that one's vLLM lives till the module ends, and
    # one vLLM at a time keeps to about 3 GB.
    log_path = tiny / "vllm-runtime.log"
    with serve_vllm(adapter_shard(tiny, max_loras=1), tiny, "vLLM loading adapters at run time",
                    log_name=log_path.name) as engine:
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


def test_each_adapter_answers_as_vllm_serves_it(vllm: str, state: StateFile,  # noqa: F811
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

