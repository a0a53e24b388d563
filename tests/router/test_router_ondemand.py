"""On-demand models through the Activator seam: the router's own logic, with an activator that
starts a real llama-server and records it in the state file the way apply's activation would."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import openai
import pytest

from llmgw.router import RouterSettings
from tests.support.router import FAST, Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine

MESSAGES: list[Any] = [{"role": "user", "content": "Wake up."}]


class EngineActivator:
    """Starts a llama-server per activation and writes it into the state as `ready`."""

    def __init__(self, state: StateFile, start_engine: Callable[..., Engine], *, fail: bool = False,
                 record: bool = True) -> None:
        self.state = state
        self.start_engine = start_engine
        self.fail = fail
        self.record = record
        self.activations: list[str] = []
        self.deactivations: list[str] = []
        self.engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    async def activate(self, model_name: str) -> None:
        self.activations.append(model_name)
        if self.fail:
            raise RuntimeError("no host has room for it")
        engine = await asyncio.to_thread(self.start_engine, model_name)
        if not self.record:
            return
        rid = f"{model_name}-{len(self.activations)}"
        self.engines[rid] = engine
        await asyncio.to_thread(self._edit, lambda reps: [*reps, replica(rid, model_name, engine.endpoint)])

    async def deactivate(self, replica_id: str) -> None:
        self.deactivations.append(replica_id)
        await asyncio.to_thread(self.engines.pop(replica_id).kill)
        await asyncio.to_thread(self._edit, lambda reps: [r for r in reps if r.id != replica_id])

    def _edit(self, change: Callable[[list[Any]], list[Any]]) -> None:
        with self._lock:
            current = self.state.read()
            self.state.write(current.models, change(list(current.replicas)))


def test_request_starts_the_model_and_idle_stops_it(engines: Callable[..., Engine], state: StateFile,
                                                    start_router: Callable[..., RunningRouter],
                                                    api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=2)], [])
    activator = EngineActivator(state, engines)
    router = start_router(state.path, activator=activator)
    client = router.client(api_key)
    assert [m.id for m in client.models.list()] == ["lazy"]  # it can answer: the router can start it
    assert router.admin("/api/v1/replicas")["replicas"] == []

    results: list[Any] = []

    def ask() -> None:
        results.append(client.chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=3))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3 and all(r.usage.completion_tokens == 3 for r in results)
    assert activator.activations == ["lazy"]  # held requests share one activation
    (rid,) = activator.engines
    assert router.replica(rid)["requests"] == 3

    wait_until(lambda: activator.deactivations == [rid], 20, "the idle replica to be stopped")
    wait_until(lambda: router.admin("/api/v1/replicas")["replicas"] == [], 10, "the state without it")
    assert not activator.engines

    again = client.chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert again.usage is not None and again.usage.completion_tokens == 2
    assert activator.activations == ["lazy", "lazy"]


def test_failed_activation_is_503_with_the_reason(engines: Callable[..., Engine], state: StateFile,
                                                  start_router: Callable[..., RunningRouter], api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=60)], [])
    router = start_router(state.path, activator=EngineActivator(state, engines, fail=True))
    with pytest.raises(openai.InternalServerError) as info:
        router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 503
    assert "could not start model 'lazy': no host has room for it" in info.value.message


def test_activation_that_never_shows_up_is_bounded(engines: Callable[..., Engine], state: StateFile,
                                                   start_router: Callable[..., RunningRouter],
                                                   api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=60), model("backup")], [])
    router = start_router(state.path, activator=EngineActivator(state, engines, record=False),
                          settings=RouterSettings(**{**FAST.__dict__, "activation_timeout": 1.5}))
    with pytest.raises(openai.InternalServerError) as info:
        router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert "did not become ready within 1.5 s" in info.value.message


def test_on_demand_fallback_answers_when_activation_fails(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    e = engines("backup")
    state.write([model("lazy", min=0, idle_timeout=60, fallbacks=("backup",)), model("backup")],
                [replica("backup-0", "backup", e.endpoint)])
    router = start_router(state.path, activator=EngineActivator(state, engines, fail=True))
    reply = router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert reply.choices and router.replica("backup-0")["requests"] == 1
