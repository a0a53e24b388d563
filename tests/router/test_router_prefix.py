"""Prefix-affinity routing over real TCP: the router in front of three real llama-server replicas.

Requests sharing a long system prompt land on one replica under `routing: prefix-affinity`
(and that engine reports the prefix cached), while under `least-load` they spread; the
load bound moves requests off the prefix's replica while it holds more than its share.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from llmgw.state import ModelRecord
from tests.support.router import Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine

_WORDS = "the of and to in is it you that he was for on are with as his they be at one have this from"
WORDS = _WORDS.split()


def system_prompt(seed: int, n: int = 250) -> str:
    rng = random.Random(seed)
    return f"You are helper {seed}. " + " ".join(rng.choice(WORDS) for _ in range(n))


def affine(name: str) -> ModelRecord:
    return model(name).model_copy(update={"routing": "prefix-affinity"})


@dataclass
class Fleet:
    engines: list[Engine]
    router: RunningRouter
    client: openai.OpenAI

    def served(self, prefix: str) -> dict[str, int]:
        """Requests the router sent to each replica of the model whose ids start with `prefix`."""
        return {r["id"]: r["requests"] for r in self.router.admin("/api/v1/replicas")["replicas"]
                if r["id"].startswith(prefix)}

    def in_flight(self, prefix: str) -> dict[str, int]:
        return {r["id"]: r["in_flight"] for r in self.router.admin("/api/v1/replicas")["replicas"]
                if r["id"].startswith(prefix)}

    def ask(self, model_name: str, system: str, question: str, max_tokens: int = 2) -> Any:
        return self.client.chat.completions.create(
            model=model_name, max_tokens=max_tokens, temperature=0,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])


@pytest.fixture
def fleet(engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
          api_key: str) -> Fleet:
    # Both models on the same three engines: `affine` routes by prefix, `spread` by load.
    es = [engines(f"e{i}", parallel=4, ctx=16384) for i in range(3)]
    state.write([affine("affine"), model("spread")],
                [replica(f"affine-{i}", "affine", e.endpoint) for i, e in enumerate(es)]
                + [replica(f"spread-{i}", "spread", e.endpoint) for i, e in enumerate(es)])
    router = start_router(state.path)
    return Fleet(es, router, router.client(api_key))


def test_a_shared_prefix_lands_on_one_replica_and_is_cached_there(fleet: Fleet) -> None:
    system = system_prompt(1)
    cached = []
    for i in range(6):
        done = fleet.ask("affine", system, f"question {i}?")
        details = done.usage.prompt_tokens_details if done.usage else None
        cached.append((details.cached_tokens or 0) if details else 0)
    served = fleet.served("affine-")
    assert sorted(served.values()) == [0, 0, 6], served  # one replica took every request
    prompt = done.usage.prompt_tokens if done.usage else 0
    assert cached[0] == 0 and all(c > prompt // 2 for c in cached[1:]), (cached, prompt)  # its cache held it

    # The same traffic under least-load: spread over all three, so two of three requests miss.
    other = system_prompt(2)
    for i in range(6):
        fleet.ask("spread", other, f"question {i}?")
    assert sorted(fleet.served("spread-").values()) == [2, 2, 2]

    # Different prefixes still use every replica.
    for seed in range(3, 21):
        fleet.ask("affine", system_prompt(seed, 20), "hi")
    assert all(n > 0 for n in fleet.served("affine-").values()), fleet.served("affine-")


def test_the_load_bound_moves_requests_off_a_hot_replica(fleet: Fleet) -> None:
    system = system_prompt(7)
    fleet.ask("affine", system, "warm")
    home = next(rid for rid, n in fleet.served("affine-").items() if n == 1)
    # Four long streams of one prefix at once: a replica may hold ceil(1.25 * (in flight +
    # 1) / 3) + 1 of them: the first three go home (bounds 2, 2, 3), the fourth finds home
    # at its bound of 3 and goes to the next one clockwise.
    streams = []
    try:
        for i in range(4):
            stream = fleet.client.chat.completions.create(
                model="affine", max_tokens=3000, stream=True,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": f"long {i}"}])
            next(iter(stream))  # the engine is generating: the request is in flight
            streams.append(stream)
            wait_until(lambda n=i + 1: sum(fleet.in_flight("affine-").values()) == n, 10, f"{i + 1} in flight")
        assert sorted(fleet.in_flight("affine-").values()) == [0, 1, 3], fleet.in_flight("affine-")
        assert fleet.in_flight("affine-")[home] == 3  # one stream was moved off its home
    finally:
        for s in streams:
            s.close()
    wait_until(lambda: sum(fleet.in_flight("affine-").values()) == 0, 30, "the streams to end")
    fleet.ask("affine", system, "back again")
    assert fleet.served("affine-")[home] == 5  # with the load gone, the prefix goes home again
