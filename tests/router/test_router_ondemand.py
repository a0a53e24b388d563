"""On-demand models, the router's side: a request with no replica to go to asks the controller
(a DemandClient) and is held until a replica shows up in the router's state, bounded; a
streaming one gets SSE comments meanwhile; the router reports its load.

Most tests hand the router a stand-in for the controller that starts a real llama-server and
writes it into the state, as the controller's apply would; the last one speaks to a real
controller's demand API over HTTP (llmgw.router.activator.ControllerClient)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from llmgw.apply.controller_token import router_token_for
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.controller import Controller
from llmgw.controller.api import demand_app
from llmgw.router.activator import TOKEN_FILE, ControllerClient
from llmgw.router.ondemand import Answer
from llmgw.site import Site
from tests.controller.test_demand_api import make_site
from tests.support.net import free_port
from tests.support.router import Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine

MESSAGES: list[Any] = [{"role": "user", "content": "Wake up."}]


class StandIn:
    """Plays the controller: the first ask for a cold model starts a llama-server (once the
    test lets it, `go`) and records it `ready` in the state; the answers say so."""

    name = "router-a"

    def __init__(self, state: StateFile, start_engine: Callable[..., Engine], *, fail: str = "",
                 record: bool = True, hold_s: float | None = None) -> None:
        self.state = state
        self.start_engine = start_engine
        self.fail = fail
        self.record = record
        self.hold_s = hold_s
        self.go = threading.Event()
        self.go.set()
        self.activations: list[str] = []
        self.asks = 0
        self.concurrent = 0
        self.most_concurrent = 0
        self.reports: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    async def ask(self, model_name: str) -> Answer:
        self.asks += 1
        self.concurrent += 1
        self.most_concurrent = max(self.most_concurrent, self.concurrent)
        try:
            await asyncio.sleep(0)  # an ask takes a moment: concurrent asks would overlap here
            if self.fail:
                return Answer("failed", self.fail, self.hold_s)
            if any(r.model == model_name for r in self.state.read().replicas):
                return Answer("ready", hold_s=self.hold_s)
            if model_name not in self.activations:
                self.activations.append(model_name)
                threading.Thread(target=self._start, args=(model_name,), daemon=True).start()
            return Answer("starting", "asked by a router", self.hold_s)
        finally:
            self.concurrent -= 1

    def _start(self, model_name: str) -> None:
        self.go.wait(60)
        engine = self.start_engine(model_name)
        if self.record:
            with self._lock:
                current = self.state.read()
                self.state.write(current.models, [*current.replicas, replica(f"{model_name}-1", model_name,
                                                                             engine.endpoint)])

    async def report(self, report: dict[str, Any]) -> None:
        self.reports.append(report)


def test_held_requests_share_one_ask_and_are_routed_once_a_replica_is_ready(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=2)], [])
    ctl = StandIn(state, engines)
    router = start_router(state.path, activator=ctl)
    client = router.client(api_key)
    assert [m.id for m in client.models.list()] == ["lazy"]  # it can answer: the controller can start it
    results: list[Any] = []

    def ask() -> None:
        results.append(client.chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=3))

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert len(results) == 5 and all(r.usage.completion_tokens == 3 for r in results)
    assert ctl.activations == ["lazy"] and ctl.most_concurrent == 1  # one ask in flight per model
    assert router.replica("lazy-1")["requests"] == 5
    wait_until(lambda: any("lazy-1" in r["replicas"] for r in ctl.reports), 10, "a report naming the replica")
    last = ctl.reports[-1]
    assert last["router"] == "router-a" and last["replicas"]["lazy-1"]["in_flight"] == 0
    assert "lazy" in last["model_idle_s"] and not last["waiting"]


def test_a_held_stream_gets_keepalive_comments_then_the_completion(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=60)], [])
    ctl = StandIn(state, engines)
    ctl.go.clear()  # the replica starts only once the client has seen a comment
    router = start_router(state.path, activator=ctl)
    lines: list[str] = []
    body = {"model": "lazy", "messages": MESSAGES, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{router.base_url}/v1/chat/completions", json=body, timeout=90,
                      headers={"Authorization": f"Bearer {api_key}"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            lines.append(line)
            if line.startswith(": waiting for a replica of lazy"):
                ctl.go.set()
    assert lines[0].startswith(": waiting for a replica of lazy to start")
    data = [ln for ln in lines if ln.startswith("data: ")]
    assert data[-1] == "data: [DONE]" and len(data) >= 3, lines
    # The openai client reads such a stream as any other.
    chunks = list(router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2,
                                                                 stream=True))
    assert chunks


def test_a_refused_activation_is_503_with_the_controllers_reason(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=60)], [])
    router = start_router(state.path, activator=StandIn(state, engines, fail="no node can take a replica of lazy"))
    with pytest.raises(openai.InternalServerError) as info:
        router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 503 and info.value.response.headers["retry-after"]
    assert "could not start model 'lazy': no node can take a replica of lazy" in info.value.message


def test_the_hold_is_bounded_by_the_models_activation_timeout(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    state.write([model("lazy", min=0, idle_timeout=60)], [])
    router = start_router(state.path, activator=StandIn(state, engines, record=False, hold_s=1.5))
    began = time.monotonic()
    with pytest.raises(openai.InternalServerError) as info:
        router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert "did not become ready within 1.5 s" in info.value.message
    assert time.monotonic() - began < 30


def test_a_fallback_answers_when_the_activation_is_refused(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    e = engines("backup")
    state.write([model("lazy", min=0, idle_timeout=60, fallbacks=("backup",)), model("backup")],
                [replica("backup-0", "backup", e.endpoint)])
    router = start_router(state.path, activator=StandIn(state, engines, fail="no room"))
    reply = router.client(api_key).chat.completions.create(model="lazy", messages=MESSAGES, max_tokens=2)
    assert reply.choices and router.replica("backup-0")["requests"] == 1


def test_the_router_asks_a_real_controller_over_http_and_passes_its_refusal_on(
        tmp_path: Path, state: StateFile, start_router: Callable[..., RunningRouter], api_key: str) -> None:
    site = make_site(tmp_path / "site")  # model `new`, min 0; no node can take it
    ctl = Controller(site, branch=None, say=lambda _l: None)
    state_file = Site.load(site).state_file
    token = router_token_for(state_file, "r1")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(demand_app(ctl, EngineKeyring.beside(state_file)), host="127.0.0.1",
                                           port=port,
                                           log_level="warning"))
    api = threading.Thread(target=server.run, daemon=True)
    api.start()
    stop = threading.Event()
    loop = threading.Thread(target=ctl.serve_forever, args=(3600, stop), kwargs={"demand_interval": 0.2},
                            daemon=True)
    loop.start()
    try:
        (state.path.parent / TOKEN_FILE).write_text(token + "\n")
        state.write([model("new", min=0, idle_timeout=60)], [])
        router = start_router(state.path, activator=ControllerClient(f"http://127.0.0.1:{port}",
                                                                     state.path.parent / TOKEN_FILE, "r1"))
        with pytest.raises(openai.InternalServerError) as info:
            router.client(api_key).chat.completions.create(model="new", messages=MESSAGES,
                                                                           max_tokens=2)
        assert info.value.status_code == 503
        assert "could not start model 'new': cannot place more of new" in info.value.message, info.value.message
        wait_until(lambda: [r.router for r in ctl.scaler.reports.fresh(time.monotonic())] == ["r1"], 10,
                   "the router's load report")
    finally:
        stop.set()
        server.should_exit = True
        api.join(10)
        loop.join(10)
