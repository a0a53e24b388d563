"""Tight quotas against a real llama-server: a prompt the byte bound refuses, admitted by its
exact count (the engine's own tokenizer, asked by the router with the engine's key), and
charged what the engine counted.

The prompt is ~32k tokens of words the tiny model's vocabulary holds whole (3.5 bytes a
token, about what real tokenizers get from English): 112 KB of body. Under a daily limit of
50,000 tokens the byte bound (a token per byte) refuses it; its exact count fits, and only
its completion may pass the limit. Prefilling 32k tokens is most of this test's time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import openai
import pytest

from llmgw.store import Store
from tests.support.router import FAST, Engine, RunningRouter, StateFile, model, replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.engine

# Words the tiny vocabulary holds as one token each (with their leading space).
WORDS = [
    "the", "of", "and", "to", "in", "is", "it", "he", "was", "for", "on", "as", "I", "his", "they", "be",
    "at", "one", "this", "or", "by", "we", "can", "up", "an", "she", "do", "if", "then", "them", "so", "her",
    "has", "go", "no", "my", "know", "now"
]
LIMIT = 50_000
MAX_TOKENS = 4
CTX = 40960  # the tiny model says 2048: llama-server caps a slot there unless the metadata says more


def _long_prompt() -> list[dict[str, str]]:
    return [{"role": "user", "content": " ".join(WORDS * 842)}]  # ~32k tokens, ~112 KB


def test_a_32k_prompt_the_byte_bound_refuses_is_admitted_by_its_exact_count(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    e = engines("big", parallel=1, ctx=CTX, extra=("--override-kv", f"llama.context_length=int:{CTX}"))
    state.write([model("m")], [replica("r0", "m", e.endpoint)])
    messages = _long_prompt()
    body_bytes = len(json.dumps({"model": "m", "messages": messages, "max_tokens": MAX_TOKENS}))
    assert body_bytes > LIMIT  # the byte bound cannot fit it

    # The byte bound alone (counting off): refused, as before.
    sqlite_store.set_group("bytes", tokens_per_day=LIMIT)
    bytes_key = sqlite_store.create_key("bytes-key", "bytes")[1]
    plain = start_router(state.path, settings=dataclasses.replace(FAST, tokenize_timeout=0))
    with pytest.raises(openai.RateLimitError) as refused:
        plain.client(bytes_key).chat.completions.create(model="m", messages=messages,  # type: ignore[arg-type]
                                                        max_tokens=MAX_TOKENS)
    assert refused.value.code == "insufficient_quota"

    sqlite_store.set_group("exact", tokens_per_day=LIMIT)
    key = sqlite_store.create_key("exact-key", "exact")[1]
    rr = start_router(state.path, settings=dataclasses.replace(FAST, first_byte_timeout=300))  # a long prefill
    counter = rr.server.router.proxy.counter  # type: ignore[union-attr]
    quotas = rr.server.router.quotas  # type: ignore[union-attr]
    client = rr.client(key, timeout=300)

    # Far from the limit nothing is counted: a short prompt is admitted by its bytes.
    short = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "the of and"}],
                                           max_tokens=MAX_TOKENS)
    assert short.usage is not None
    assert counter.asked == 0 and quotas.exact_admits == 0

    resp = client.chat.completions.create(model="m", messages=messages,  # type: ignore[arg-type]
                                          max_tokens=MAX_TOKENS)
    assert resp.usage is not None
    print(f"\nprompt: {body_bytes} body bytes, {resp.usage.prompt_tokens} tokens by the engine "
          f"({body_bytes / resp.usage.prompt_tokens:.2f} bytes a token); limit {LIMIT}")
    assert resp.usage.prompt_tokens > 30_000
    assert quotas.exact_admits == 1 and counter.asked == 1
    # What the router counted (and reserved) is what the engine charged.
    assert list(counter.cache.values()) == [resp.usage.prompt_tokens]

    charged = short.usage.total_tokens + resp.usage.total_tokens

    def usage() -> dict[str, int]:
        row = {k["name"]: k for k in rr.admin("/api/v1/usage")["keys"]}.get("exact-key", {})
        return row if row.get("total_tokens") == charged else {}

    row = wait_until(usage, 15, "the usage flushed to the store")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        short.usage.prompt_tokens + resp.usage.prompt_tokens, short.usage.completion_tokens + MAX_TOKENS)

    # The same prompt again no longer fits beside what was used, by its exact count either
    # (from the cache: the engine is not asked again, nor does it see the request).
    with pytest.raises(openai.RateLimitError) as over:
        client.chat.completions.create(model="m", messages=messages,  # type: ignore[arg-type]
                                       max_tokens=MAX_TOKENS)
    assert over.value.code == "insufficient_quota"
    assert counter.asked == 1 and quotas.exact_admits == 1
