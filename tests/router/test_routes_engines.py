"""Weighted routes through a real router: real llama-server engines behind a 90/10 route, the
`openai` client in front; and a canary that answers 500s losing its share to the guard while
no client request fails (docs/routes.md)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

from llmgw.catalog import Route
from llmgw.planner.routes import route_record
from llmgw.state import ModelRecord
from llmgw.store import Store, open_store
from llmgw.views.ask_routers import fetch_runtime
from tests.router.test_router_workers import start_workers, stop
from tests.support.router import HTTP, Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine

STABLE, CANARY = "qwen3-8b", "qwen3-8b-2511"


def route(guard: dict[str, Any] | None = None) -> ModelRecord:
    """The route's record as the planner writes it into the state."""
    return route_record(Route.model_validate({"name": "chat", "routes": [{"model": STABLE, "weight": 90},
                                                                         {"model": CANARY, "weight": 10}],
                                              "guard": guard}))


def ask(client: Any, *turns: str) -> str:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    reply = client.chat.completions.create(model="chat", messages=messages, max_tokens=1, temperature=0)
    return str(reply.model)


@contextmanager
def failing_engine() -> Iterator[tuple[str, list[str]]]:
    """An engine standing in for a broken canary: healthy on /health, 500 on every request."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer(200, b"{\"status\":\"ok\"}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hits.append(self.path)
            self._answer(500, b"{\"error\":{\"message\":\"canary broke\",\"type\":\"server_error\",\"code\":500}}")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def metric(router: RunningRouter, name: str, **labels: str) -> float | None:
    text = HTTP.get(router.admin_url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # prometheus_client sorts them
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_90_10_route_splits_a_thousand_requests_and_keeps_conversations(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    stable, canary = engines(STABLE, parallel=8), engines(CANARY, parallel=8)  # each answers with its name
    state.write([model(STABLE), model(CANARY), route()],
                [replica("qwen3-8b-1", STABLE, stable.endpoint), replica("qwen3-8b-2511-1", CANARY, canary.endpoint)])
    router = start_router(state.path)
    clients = [router.client(sqlite_store.create_key(f"user-{k}")[1]) for k in range(20)]
    conversations = [(k, c) for k in range(len(clients)) for c in range(50)]  # 1,000

    def first_turn(kc: tuple[int, int]) -> str:
        k, c = kc
        return ask(clients[k], f"user {k} asks question {c}")

    with ThreadPoolExecutor(8) as pool:
        served = list(pool.map(first_turn, conversations))
    got = Counter(served)
    assert set(got) == {STABLE, CANARY} and sum(got.values()) == 1000
    assert abs(got[CANARY] / 10 - 10) <= 3, got  # within 3 points of 10 %
    # The router's counts agree with the engines' answers.
    assert router.replica("qwen3-8b-2511-1")["requests"] == got[CANARY]
    assert metric(router, "llmgw_route_requests_total", route="chat", target=CANARY, status="200") == got[CANARY]
    assert metric(router, "llmgw_route_share_percent", route="chat", target=CANARY) == 10
    listed = {m.id: m for m in clients[0].models.list()}  # the route is a model to clients, serving its targets'
    assert listed["chat"].model_extra == listed[STABLE].model_extra and listed["chat"].model_extra

    def next_turns(i: int) -> bool:
        k, c = conversations[i]
        turns = [f"user {k} asks question {c}", "an answer", "and a follow-up", "another answer", "one more"]
        return all(ask(clients[k], *turns[:n]) == served[i] for n in (3, 5))

    with ThreadPoolExecutor(8) as pool:  # every 10th conversation goes on: each stays where it began
        assert all(pool.map(next_turns, range(0, 1000, 10)))


def test_a_canary_failing_its_guard_loses_its_share_and_no_request_fails(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    stable = engines(STABLE, parallel=8)
    guard = {"max_error_rate": 0.2, "window": "1m", "min_requests": 5}
    with failing_engine() as (canary_url, hits):
        state.write([model(STABLE), model(CANARY), route(guard)],
                    [replica("qwen3-8b-1", STABLE, stable.endpoint), replica("qwen3-8b-2511-1", CANARY, canary_url)])
        router = start_router(state.path)
        client = router.client(sqlite_store.create_key("tester")[1])
        answered: list[str] = []

        def tripped() -> bool:
            # Every request succeeds (a failure raises here): the canary's 500s are retried on the stable.
            answered.append(ask(client, f"question {len(answered)}"))
            return metric(router, "llmgw_route_guard_tripped", route="chat", target=CANARY) == 1

        wait_until(tripped, 60, "the canary's guard to trip")
        assert set(answered) == {STABLE} and len(hits) >= 5  # the canary was tried, and never answered a client
        assert metric(router, "llmgw_route_share_percent", route="chat", target=CANARY) == 0
        assert metric(router, "llmgw_route_share_percent", route="chat", target=STABLE) == 100
        chat = next(m for m in router.admin("/api/v1/models")["models"] if m["name"] == "chat")
        assert metric(router, "llmgw_route_guard_trips_total", route="chat", target=CANARY,
                      generation=chat["route"]["generation"]) == 1
        assert (metric(router, "llmgw_route_errors_total", route="chat", target=CANARY) or 0) >= 5
        target = chat["route"]["targets"][1]
        assert (target["model"], target["share"], target["tripped"]) == (CANARY, 0, True)
        assert target["reason"].startswith(f"{CANARY} broke the guard of route chat: 100.0% of its last ")
        # `llmgw status` reads the routers' notes (views/runtime.py, as it asks every router).
        assert fetch_runtime([router.admin_url]).notes == (target["reason"],)
        before = len(hits)
        assert {ask(client, f"after the trip {i}") for i in range(100)} == {STABLE}
        assert len(hits) == before  # no new request reaches the tripped canary
        assert metric(router, "llmgw_requests_total", model="chat", status="200") == len(answered) + 100


def test_with_several_workers_metrics_say_which_canary_any_worker_tripped(
        engines: Callable[..., Engine], state: StateFile, tmp_path: Path) -> None:
    """`llmgw router serve --workers 2`, the real CLI: each worker judges the canary on its own
    traffic, and the supervisor's /metrics merges their trips into the split in force."""
    stable = engines(STABLE, parallel=8)
    store_url = f"sqlite://{tmp_path / 'store.sqlite'}"
    store = open_store(store_url)
    key = store.create_key("tester")[1]
    store.close()
    guard = {"max_error_rate": 0.2, "window": "1m", "min_requests": 3}
    with failing_engine() as (canary_url, hits):
        state.write([model(STABLE), model(CANARY), route(guard)],
                    [replica("qwen3-8b-1", STABLE, stable.endpoint), replica("qwen3-8b-2511-1", CANARY, canary_url)])
        w = start_workers(state.path, store_url, tmp_path / "router.log")
        try:
            client = openai.OpenAI(base_url=w.base_url + "/v1", api_key=key, max_retries=0, timeout=60)
            answered: list[str] = []

            def tripped() -> bool:
                answered.append(ask(client, f"question {len(answered)}"))  # none fails
                text = w.admin("/metrics")
                return f'llmgw_route_guard_tripped{{route="chat",target="{CANARY}"}} 1.0' in text

            wait_until(tripped, 60, "a worker to trip the canary's guard")
            text = w.admin("/metrics")
            assert f'llmgw_route_share_percent{{route="chat",target="{STABLE}"}} 100.0' in text
            assert set(answered) == {STABLE} and hits
            # The supervisor's admin API (it serves no request itself) says what the workers found.
            chat = next(m for m in w.admin("/api/v1/models")["models"] if m["name"] == "chat")
            assert [(t["model"], t["share"], t["tripped"]) for t in chat["route"]["targets"]] == [
                (STABLE, 100, False), (CANARY, 0, True)]
            (note,) = w.admin("/api/v1/replicas")["notes"]
            assert note.startswith(f"{CANARY} broke the guard of route chat")
            client.close()
        finally:
            stop(w)
