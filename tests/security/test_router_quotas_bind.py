"""Token quotas bind what the engine generates (#32, "Token quotas overrun 9x").

The router reserved `default_max_tokens` for a request that named no budget, but sent the
body on unchanged, so the engine generated as much as it liked: a group with a 10,000-token
daily limit ended at 90,060 after 10 concurrent requests. `max_tokens: 100000.0`,
`"100000"` and llama.cpp's `n_predict` each reserved only the default too.

Attacked here with real routers over TCP, against the real llama-server (which, without
`max_tokens`, generates until its context is full) and against a recording engine that
generates exactly what the body it receives asks for, the way llama.cpp reads it
(`n_predict` before `max_tokens`; unlimited without either), and keeps every body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from llmgw.router import RouterSettings
from llmgw.store import Store
from tests.support.engine_double import EngineDouble
from tests.support.router import FAST, Engine, RunningRouter, StateFile, model, replica

UNBOUNDED = 100_000  # what the recording engine generates when nothing bounds it
DEFAULT = 300  # the router's default_max_tokens in these tests
SETTINGS = RouterSettings(**{**FAST.__dict__, "default_max_tokens": DEFAULT})
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me everything."}]}


@dataclass
class GreedyEngine(EngineDouble):
    """Generates exactly what the body asks (llama.cpp's reading of it) and records every body."""

    bodies: list[dict[str, Any]] = field(default_factory=list)

    def _app(self) -> web.Application:  # the generating paths alone
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        return app

    def _budget(self, body: dict[str, Any]) -> int:
        for f in ("n_predict", "max_completion_tokens", "max_tokens"):  # llama.cpp's precedence
            v = body.get(f)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return UNBOUNDED

    async def generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        n = body.get("n") if isinstance(body.get("n"), int) else 1
        prompt = body.get("prompt") if request.path == "/v1/completions" else None
        prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
        completion = self._budget(body) * n * prompts
        return web.json_response({"id": "cmpl-1", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": i, "finish_reason": "length",
                                               "message": {"role": "assistant", "content": "x"}}
                                              for i in range(n * prompts)],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": completion,
                                            "total_tokens": 10 + completion}})


@pytest.fixture
def greedy() -> Iterator[GreedyEngine]:
    eng = GreedyEngine("greedy", ("tiny",))
    eng.start()
    yield eng
    eng.stop()


def post(router: RunningRouter, key: str, body: dict[str, Any], path: str = "/v1/chat/completions",
         client: httpx.Client | None = None) -> httpx.Response:
    c = client or httpx.Client(timeout=120)
    try:
        return c.post(router.base_url + path, content=json.dumps(body).encode(),
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    finally:
        if client is None:
            c.close()


def fire(router: RunningRouter, key: str, n: int, body: dict[str, Any],
         path: str = "/v1/chat/completions") -> list[httpx.Response]:
    """`n` requests at once, as a client out to beat its limit would send them."""
    with httpx.Client(timeout=300, limits=httpx.Limits(max_connections=n)) as client, ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: post(router, key, body, path, client=client), range(n)))


def used_tokens(router: RunningRouter, store: Store, key_id: str) -> int:
    router.admin("/api/v1/usage")  # the router writes what it counted before answering
    return sum(r.total_tokens for r in store.usage() if r.key_id == key_id)


def limited_key(store: Store, limit: int) -> tuple[str, str]:
    store.set_group("budget", tokens_per_day=limit)
    rec, key = store.create_key("greedy", "budget")
    return rec.id, key


def test_twenty_concurrent_requests_without_max_tokens_end_one_budget_over_at_most(
        greedy: GreedyEngine, state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    state.write([model("tiny")], [replica("tiny-0", "tiny", greedy.endpoint)])
    router = start_router(state.path, settings=SETTINGS)
    limit = 3_000  # about 7 requests' reservations (the default budget and the body's bytes): not all 20
    key_id, key = limited_key(sqlite_store, limit)
    answers = fire(router, key, 20, CHAT)
    assert {r.status_code for r in answers} <= {200, 429}, [r.text[:200] for r in answers]
    served = sum(r.status_code == 200 for r in answers)
    used = used_tokens(router, sqlite_store, key_id)
    print(f"20 concurrent requests without max_tokens: {served} served, {used} tokens against {limit}")
    assert 1 <= served < 20
    assert used <= limit + DEFAULT, f"{used} tokens used against a limit of {limit} (default budget {DEFAULT})"
    assert all(b.get("max_tokens") == DEFAULT for b in greedy.bodies), greedy.bodies[:3]


@pytest.mark.engine
def test_the_real_engine_stops_at_the_reserved_budget(engines: Callable[..., Engine], state: StateFile,
                                                      start_router: Callable[..., RunningRouter],
                                                      sqlite_store: Store) -> None:
    """llama-server without max_tokens generates until its context is full."""
    e = engines("tiny", parallel=4, ctx=4096)
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    budget = 32
    router = start_router(state.path, settings=RouterSettings(**{**FAST.__dict__, "default_max_tokens": budget}))
    limit = 2_000
    key_id, key = limited_key(sqlite_store, limit)
    answers = fire(router, key, 20, CHAT)
    assert {r.status_code for r in answers} <= {200, 429}, [r.text[:200] for r in answers]
    served = [r.json()["usage"]["completion_tokens"] for r in answers if r.status_code == 200]
    used = used_tokens(router, sqlite_store, key_id)
    print(f"llama-server, 20 concurrent without max_tokens: completions {served}, {used} tokens against {limit}")
    assert served and max(served) <= budget
    assert used <= limit + budget, f"{used} tokens used against a limit of {limit} (default budget {budget})"


# (path, what the client sent, the budget fields the engine must get)
FORWARDED: list[tuple[str, dict[str, Any], dict[str, int]]] = [
    ("/v1/chat/completions", {}, {"max_tokens": DEFAULT}),
    ("/v1/chat/completions", {"max_tokens": 50}, {"max_tokens": 50}),
    ("/v1/chat/completions", {"max_completion_tokens": 40}, {"max_completion_tokens": 40}),
    # llama.cpp reads n_predict first: the least of the budgets goes into both
    ("/v1/chat/completions", {"max_tokens": 30, "n_predict": 5000}, {"max_tokens": 30, "n_predict": 30}),
    ("/v1/chat/completions", {"n_predict": 60}, {"n_predict": 60, "max_tokens": 60}),
    ("/v1/completions", {"prompt": "Once", "n": 2}, {"max_tokens": DEFAULT, "n": 2}),
]


def test_the_forwarded_body_carries_the_reserved_budget(greedy: GreedyEngine, state: StateFile,
                                                        start_router: Callable[..., RunningRouter],
                                                        sqlite_store: Store) -> None:
    state.write([model("tiny")], [replica("tiny-0", "tiny", greedy.endpoint)])
    router = start_router(state.path, settings=SETTINGS)
    _, key = limited_key(sqlite_store, 1_000_000)
    budget_fields = {"max_tokens", "max_completion_tokens", "n_predict", "n"}
    for path, sent, forwarded in FORWARDED:
        body = {**CHAT, **sent} if path.endswith("chat/completions") else {"model": "tiny", **sent}
        answer = post(router, key, body, path)
        assert answer.status_code == 200, answer.text
        got = greedy.bodies.pop()
        assert {k: v for k, v in got.items() if k in budget_fields} == forwarded, (path, sent)


def test_n_choices_and_batched_prompts_are_reserved(greedy: GreedyEngine, state: StateFile,
                                                    start_router: Callable[..., RunningRouter],
                                                    sqlite_store: Store) -> None:
    """n x prompts sequences of max_tokens each: the reservation counts them all."""
    state.write([model("tiny")], [replica("tiny-0", "tiny", greedy.endpoint)])
    router = start_router(state.path, settings=SETTINGS)
    limit = 3_000
    key_id, key = limited_key(sqlite_store, limit)
    body = {"model": "tiny", "prompt": ["a", "b", "c"], "n": 4, "max_tokens": 100}  # 1,200 tokens each
    answers = fire(router, key, 8, body, "/v1/completions")
    assert {r.status_code for r in answers} <= {200, 429}
    used = used_tokens(router, sqlite_store, key_id)
    assert used <= limit + 1_200, f"{used} tokens against {limit}: n and the prompts were not reserved"


@pytest.mark.parametrize(("field_name", "value"), [
    ("max_tokens", 100000.0), ("max_tokens", "100000"), ("max_tokens", True), ("max_tokens", -1),
    ("max_tokens", 0), ("max_tokens", 10**12), ("max_completion_tokens", 1.5), ("n_predict", -1),
    ("n_predict", "50"), ("n", "9"), ("n", 1000), ("n", 2.0),
])
def test_budgets_that_are_not_integers_in_range_are_a_400(greedy: GreedyEngine, state: StateFile,
                                                          start_router: Callable[..., RunningRouter],
                                                          sqlite_store: Store, field_name: str,
                                                          value: object) -> None:
    state.write([model("tiny")], [replica("tiny-0", "tiny", greedy.endpoint)])
    router = start_router(state.path, settings=SETTINGS)
    _, key = limited_key(sqlite_store, 1_000_000)
    answer = post(router, key, {**CHAT, field_name: value})
    assert answer.status_code == 400, f"{field_name}={value!r}: {answer.status_code} {answer.text[:200]}"
    err = answer.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == field_name
    assert field_name in err["message"] and "integer" in err["message"]
    assert greedy.bodies == []  # never reached the engine
