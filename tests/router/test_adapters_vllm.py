"""LoRA adapters on vLLM (its CPU build, from the parser venv scripts/build-engine-venvs makes):
the command line llmgw builds for a shard with two tiny PEFT adapters (scripts/make_tiny_peft_lora.py)
starts vLLM, and through the router each adapter name answers as vLLM's own adapter of that
name does, differently from the base; `/v1/models` lists them with their parent.

One vLLM start (about a minute on a quiet machine, several on a busy one; about 3 GB)."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from llmgw.state import AdapterRecord, LoadedAdapter
from llmgw.store import Store
from tests.support.router import CLIENTS, RunningRouter, StateFile, model, replica
from tests.support.vllm import vllm  # noqa: F401 (the fixture, shared there)

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0, "seed": 7}


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
