"""LoRA adapters end to end through the router: the real `openai` client, the real router,
real llama-server replicas of the tiny model, one with two tiny GGUF adapters
(scripts/make_tiny_lora_gguf.py) and one without (a replica from before the adapters)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.state import AdapterRecord, LoadedAdapter
from llmgw.store import Store
from tests.support.router import HTTP, Engine, RunningRouter, StateFile, model, replica

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 12, "temperature": 0, "seed": 7}


def _adapter(path: Path, seed: int) -> Path:
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_lora_gguf.py"), str(path), "--seed", str(seed)],
                   check=True, capture_output=True)
    return path


def test_each_adapter_answers_as_itself_on_the_replica_that_has_it(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store, tmp_path: Path) -> None:
    sql, poet = _adapter(tmp_path / "sql.gguf", 1), _adapter(tmp_path / "poet.gguf", 2)
    with_lora = engines("tiny", extra=("--lora", f"{sql},{poet}"))
    plain = engines("tiny")
    base = model("tiny").model_copy(update={"adapters": [AdapterRecord(name="tiny-sql", aliases=["sql"]),
                                                         AdapterRecord(name="tiny-poet")]})
    r_lora = replica("tiny-lora", "tiny", with_lora.endpoint).model_copy(update={"adapters": [
        LoadedAdapter(name="tiny-sql"), LoadedAdapter(name="tiny-poet")]})
    state.write([base], [r_lora, replica("tiny-plain", "tiny", plain.endpoint)])
    # What each should answer, asked of the engines directly: the plain one is the base.
    expected = {"tiny": plain.client().chat.completions.create(model="tiny", **ASK).choices[0].message.content}
    for i, name in enumerate(("tiny-sql", "tiny-poet")):
        direct = with_lora.client().chat.completions.create(
            model="tiny", **ASK, extra_body={"lora": [{"id": i, "scale": 1.0}]})
        expected[name] = direct.choices[0].message.content
    assert len(set(expected.values())) == 3, expected  # the adapters change the answer, each its own way

    _, key = sqlite_store.create_key("lora-key")
    router = start_router(state.path)
    client = router.client(key)
    for _ in range(3):  # the base on either replica (adapters off on the one that has them)
        got = client.chat.completions.create(model="tiny", **ASK)
        assert got.choices[0].message.content == expected["tiny"]
        assert got.model is not None
    for name, adapter in (("tiny-sql", "tiny-sql"), ("sql", "tiny-sql"), ("tiny-poet", "tiny-poet")):
        for _ in range(2):
            got = client.chat.completions.create(model=name, **ASK)
            assert got.choices[0].message.content == expected[adapter], name
    streamed = client.chat.completions.create(model="tiny-poet", **ASK, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == expected["tiny-poet"]

    # Adapter requests went to the replica with the adapters only: 6 plain + 1 streamed, plus
    # its share of the 3 base requests; the plain replica had only base requests.
    replicas = {r["id"]: r for r in router.admin("/api/v1/replicas")["replicas"]}
    assert replicas["tiny-plain"]["requests"] + replicas["tiny-lora"]["requests"] == 10
    assert replicas["tiny-lora"]["requests"] >= 7

    usage = {k["name"]: k for k in router.admin("/api/v1/usage")["keys"]}["lora-key"]["models"]
    assert {m: u["requests"] for m, u in usage.items()} == {"tiny": 3, "tiny-sql": 4, "tiny-poet": 3}
    assert all(u["completion_tokens"] == u["requests"] * ASK["max_tokens"] for u in usage.values())

    listed = {m.id: m for m in client.models.list().data}
    assert set(listed) == {"tiny", "tiny-sql", "tiny-poet"}
    assert listed["tiny-sql"].model_extra is not None and listed["tiny-sql"].model_extra["parent"] == "tiny"
    assert "parent" not in (listed["tiny"].model_extra or {})
    assert client.models.retrieve("sql").id == "tiny-sql"

    metrics = HTTP.get(router.admin_url + "/metrics").text
    assert 'llmgw_requests_total{model="tiny-sql",status="200"} 4.0' in metrics


def test_an_adapter_of_an_on_demand_model_starts_its_base_and_is_held_until_it_serves(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str, tmp_path: Path) -> None:
    """No replica of the base runs: a request for its adapter asks the controller for the base
    (tests/router/test_router_ondemand.py's stand-in, starting a real llama-server with the
    adapter as the base's replicas load it), is held, and is answered by the adapter."""
    from llmgw.router.ondemand import Answer

    lora = _adapter(tmp_path / "sql.gguf", 1)
    base = model("lazy", min=0, idle_timeout=30).model_copy(update={"adapters": [AdapterRecord(name="lazy-sql")]})
    state.write([base], [])
    asked: list[str] = []
    started: list[Engine] = []

    class Controller:
        name = "router-a"

        async def ask(self, model_name: str) -> Answer:
            asked.append(model_name)
            if not started:
                started.append(engines("lazy", extra=("--lora", str(lora))))
                state.write([base], [replica("lazy-1", "lazy", started[0].endpoint).model_copy(
                    update={"adapters": [LoadedAdapter(name="lazy-sql")]})])
            return Answer("ready")

        async def report(self, report: dict[str, object]) -> None:
            pass

    router = start_router(state.path, activator=Controller())
    got = router.client(api_key).chat.completions.create(model="lazy-sql", **ASK)
    assert asked and set(asked) == {"lazy"}  # the base is what was asked for, never the adapter
    direct = started[0].client().chat.completions.create(model="lazy", **ASK,
                                                         extra_body={"lora": [{"id": 0, "scale": 1.0}]})
    assert got.choices[0].message.content == direct.choices[0].message.content
    assert router.replica("lazy-1")["requests"] == 1
