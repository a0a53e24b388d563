"""Quotas' exact-count path (quotas.py `admit` with a `count`), against a real SQLite store,
and what of a request tokenize.py sends an engine to count.

The count is asked only when the byte bound is what a token limit refuses: never for a
key under no limit, a key far from its limit, or a request per minute too many.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from llmgw.router.engine_keys import EngineKeys
from llmgw.router.openai_errors import RouterError
from llmgw.router.principal import GroupQuota, Principal
from llmgw.router.quotas import Budget, Quotas
from llmgw.router.settings import RouterSettings
from llmgw.router.table import RoutingTable
from llmgw.router.tokenize import PromptCounter, countable, token_ids
from llmgw.router.usage import Clock, UsageRecorder
from llmgw.state import State
from llmgw.store import Store, open_store
from tests.support.router import model, replica


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite://{tmp_path / 'store.sqlite'}")
    yield s
    s.close()


class Counts:
    """The `count` a proxy hands in: returns `n` and remembers being asked."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.asked = 0

    async def __call__(self) -> int | None:
        self.asked += 1
        return self.n


def _quotas(store: Store, **kw: object) -> Quotas:
    return Quotas(store, UsageRecorder(), Clock(), RouterSettings(**kw))  # type: ignore[arg-type]


def _principal(store: Store, group: str, **limits: int) -> Principal:
    store.set_group(group, **limits)  # type: ignore[arg-type]
    record, _ = store.create_key(f"{group}-key", group)
    return Principal(record.id, record.name, group,
                     (GroupQuota(group, limits.get("rpm"), limits.get("tokens_per_day")),))


BUDGET = Budget(tokens=10, sequences=1, fields=("max_tokens",))


async def test_the_byte_bound_refusing_asks_for_the_count_and_admits_by_it(store: Store) -> None:
    quotas = _quotas(store)
    p = _principal(store, "g", tokens_per_day=1000)
    count = Counts(300)
    rid = await quotas.admit(p, 4000, BUDGET, count)  # 4000 bytes > 1000; 300 tokens fit
    assert rid is not None and count.asked == 1 and quotas.exact_admits == 1
    assert store.reserved_tokens(now=0) == 310  # the exact prompt and the completion budget


async def test_a_key_far_from_its_limit_or_unlimited_never_asks(store: Store) -> None:
    quotas = _quotas(store)
    far = _principal(store, "far", tokens_per_day=1_000_000)
    count = Counts(300)
    assert await quotas.admit(far, 4000, BUDGET, count) is not None
    free = Principal("k", "free", None, ())
    assert await quotas.admit(free, 4000, BUDGET, count) is None
    assert count.asked == 0 and quotas.exact_admits == 0


async def test_a_count_that_does_not_fit_either_is_still_a_429(store: Store) -> None:
    quotas = _quotas(store)
    p = _principal(store, "g", tokens_per_day=1000)
    with pytest.raises(RouterError) as err:
        await quotas.admit(p, 4000, BUDGET, Counts(1200))
    assert err.value.status == 429 and err.value.code == "insufficient_quota"
    assert quotas.exact_admits == 0


async def test_no_count_keeps_the_byte_bounds_refusal(store: Store) -> None:
    quotas = _quotas(store)
    p = _principal(store, "g", tokens_per_day=1000)
    with pytest.raises(RouterError) as err:
        await quotas.admit(p, 4000, BUDGET, Counts(None))  # no engine could count it
    assert err.value.code == "insufficient_quota"


async def test_counting_off_or_an_rpm_refusal_never_asks(store: Store) -> None:
    off = _quotas(store, tokenize_timeout=0)
    p = _principal(store, "g", tokens_per_day=1000)
    count = Counts(300)
    with pytest.raises(RouterError):
        await off.admit(p, 4000, BUDGET, count)
    rpm = _principal(store, "r", rpm=1)
    quotas = _quotas(store)
    await quotas.admit(rpm, 10, BUDGET, count)
    with pytest.raises(RouterError) as err:
        await quotas.admit(rpm, 10, BUDGET, count)
    assert err.value.code == "rate_limit_exceeded"
    assert count.asked == 0


def test_what_an_engine_is_asked_to_count() -> None:
    chat = "/v1/chat/completions"
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert countable({"messages": msgs, "temperature": 0}, chat) == {"messages": msgs}
    kwargs = {"enable_thinking": False}
    assert countable({"messages": msgs, "chat_template_kwargs": kwargs}, chat) == {
        "messages": msgs, "chat_template_kwargs": kwargs}
    # The fields that change what vLLM's template renders or tokenizes travel as sent.
    flags = {"add_generation_prompt": False, "continue_final_message": True, "add_special_tokens": True}
    assert countable({"messages": msgs, **flags, "top_p": 1}, chat) == {"messages": msgs, **flags}
    # Tools are rendered by the template: sent with the messages (vLLM's /tokenize takes them;
    # the counter does not ask llama.cpp, whose /apply-template renders them only with --jinja).
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert countable({"messages": msgs, "tools": tools}, chat) == {"messages": msgs, "tools": tools}
    # What the tokenizer alone cannot count: images, the legacy `functions`.
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
    assert countable({"messages": image}, chat) is None
    assert countable({"messages": msgs, "functions": [{"name": "f"}]}, chat) is None
    assert countable({"messages": []}, chat) is None
    assert countable({"messages": [{"role": "user", "content": 3}]}, chat) is None
    assert countable({"prompt": "once upon"}, "/v1/completions") == {"prompt": "once upon"}
    assert countable({"prompt": ["a", "b"]}, "/v1/completions") == {"prompt": ["a", "b"]}
    # A Responses text input: the chat messages vLLM's Responses API renders it as.
    responses = "/v1/responses"
    assert countable({"input": "x", "instructions": "be brief"}, responses) == {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}]}
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "c"}]}]
    assert countable({"input": parts}, responses) == {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c"}]}
    # Not counted: what the engine adds or renders its own way.
    for more in ({"previous_response_id": "resp_1"}, {"tools": [{"type": "function", "name": "f"}]},
                 {"reasoning": {"effort": "low"}}):
        assert countable({"input": "x", **more}, responses) is None, more
    assert countable({"input": [{"type": "function_call_output", "call_id": "c", "output": "4"}]}, responses) is None
    assert countable({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
                     responses) is None


def test_token_id_prompts_count_themselves() -> None:
    assert token_ids({"prompt": [1, 2, 3]}, "/v1/completions") == 3
    assert token_ids({"prompt": [[1, 2], [3]]}, "/v1/completions") == 3
    assert token_ids({"prompt": [1, True]}, "/v1/completions") is None  # a bool is no token id
    assert token_ids({"prompt": "text"}, "/v1/completions") is None
    assert token_ids({"prompt": [1, 2]}, "/v1/chat/completions") is None


async def test_no_count_without_a_ready_replica_of_every_model_that_may_serve(tmp_path: Path) -> None:
    """A chain with a model that has no ready replica (on demand, starting) or whose engine
    cannot count gives no count, and asks no engine: the byte bound stands."""
    ready = replica("r0", "m", "http://127.0.0.1:9")
    cold = replica("f0", "f", "http://127.0.0.1:9", state="starting")
    sglang = replica("s0", "s", "http://127.0.0.1:9").model_copy(update={"engine": "sglang"})
    table = RoutingTable(State(models=[model("m", fallbacks=("f",)), model("f"), model("s")],
                               replicas=[ready, cold, sglang]))
    chat = {"messages": [{"role": "user", "content": "hello"}]}
    async with aiohttp.ClientSession() as session:
        counter = PromptCounter(RouterSettings(), session, EngineKeys(tmp_path / "keys.json"))
        assert await counter.count(table.chain(table.models["m"]), chat, "/v1/chat/completions") is None
        assert await counter.count(table.chain(table.models["s"]), chat, "/v1/chat/completions") is None
        ids = {"prompt": [5, 6, 7]}
        assert await counter.count(table.chain(table.models["s"]), ids, "/v1/completions") == 3
    assert counter.asked == 0


async def test_a_responses_input_is_counted_by_vllm_only(tmp_path: Path) -> None:
    """llama.cpp's Responses API is not the one whose rendering tokenize.py follows: a chain
    with a llama.cpp replica gives no count for it, and asks nothing."""
    llama = replica("r0", "m", "http://127.0.0.1:9")  # the helper's engine: llama.cpp
    table = RoutingTable(State(models=[model("m")], replicas=[llama]))
    async with aiohttp.ClientSession() as session:
        counter = PromptCounter(RouterSettings(), session, EngineKeys(tmp_path / "keys.json"))
        assert await counter.count(table.chain(table.models["m"]), {"input": "hello"}, "/v1/responses") is None
    assert counter.asked == 0
