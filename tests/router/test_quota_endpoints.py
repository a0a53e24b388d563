"""What a token limit reserves for each endpoint that takes a prompt (quotas.py), against a
real SQLite store: the Responses API, chat with tools, media inline and by URL.

The guarantee (a group ends at most one request's completion budget over its limit) needs
every reserved prompt to be at least what the engine charges. The body's bytes bound what is
in the body (a Responses `input` and `instructions`, tools, inline `data:` media); what the
engine adds from elsewhere (a stored conversation, media fetched by URL) they do not, and a
key under a token limit is refused such a request with a 400 saying what to send instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmgw.router.openai_errors import RouterError
from llmgw.router.principal import GroupQuota, Principal
from llmgw.router.quotas import Quotas, completion_budget, reservation, unbounded_prompt
from llmgw.router.settings import RouterSettings
from llmgw.router.tokenize import countable
from llmgw.router.usage import Clock, UsageRecorder
from llmgw.store import Store, open_store

S = RouterSettings()
CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
MSG = [{"role": "user", "content": "what is the weather"}]
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}]
IMAGE_URL = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
IMAGE_INLINE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite://{tmp_path / 'store.sqlite'}")
    yield s
    s.close()


def _principal(store: Store, group: str, **limits: int) -> Principal:
    store.set_group(group, **limits)  # type: ignore[arg-type]
    record, _ = store.create_key(f"{group}-key", group)
    return Principal(record.id, record.name, group,
                     (GroupQuota(group, limits.get("rpm"), limits.get("tokens_per_day")),))


def _bytes(req: dict[str, Any]) -> int:
    return len(json.dumps(req).encode())


def test_a_responses_request_reserves_its_body_and_its_max_output_tokens() -> None:
    req = {"model": "m", "instructions": "be brief", "input": "hello there", "max_output_tokens": 50}
    assert reservation(req, _bytes(req), RESPONSES, S) == _bytes(req) + 50
    # No budget given: the router's default, written into the field the Responses API reads.
    bare = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}
    budget = completion_budget(bare, RESPONSES, S)
    assert budget is not None and budget.fields == ("max_output_tokens",) and budget.tokens == S.default_max_tokens
    assert reservation(bare, _bytes(bare), RESPONSES, S) == _bytes(bare) + S.default_max_tokens
    assert not budget.unbounded  # all of it is in the body: its bytes bound it
    # Near the limit vLLM counts it, as the chat messages its Responses API renders it as.
    assert countable(bare, RESPONSES) == {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_chat_with_tools_reserves_them_by_their_bytes_and_is_counted_with_them() -> None:
    req = {"model": "m", "messages": MSG, "tools": TOOLS, "max_tokens": 20, "n": 2}
    assert reservation(req, _bytes(req), CHAT, S) == _bytes(req) + 40  # two choices of 20
    assert countable(req, CHAT) == {"messages": MSG, "tools": TOOLS}  # the template renders them: counted too
    assert unbounded_prompt(req, CHAT) == ""


@pytest.mark.parametrize(("path", "req", "why"), [
    (RESPONSES, {"input": "and then?", "previous_response_id": "resp_1"}, "previous_response_id"),
    (RESPONSES, {"input": "and then?", "conversation": "conv_1"}, "conversation"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is it"}, IMAGE_URL]}]},
     "image_url by URL"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "https://v"}}]}]},
     "video_url by URL"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]},
     "a stored file"),
    (RESPONSES, {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input_image by URL"),
    (RESPONSES, {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
     "a stored file"),
    (RESPONSES, {"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x/a.pdf"}]}]},
     "input_file by URL"),
])
def test_a_prompt_the_body_does_not_hold_is_named(path: str, req: dict[str, Any], why: str) -> None:
    assert why in unbounded_prompt(req, path)


@pytest.mark.parametrize(("path", "req"), [
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is it"}, IMAGE_INLINE]}]}),
    (CHAT, {"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}),
    (RESPONSES, {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}]}]}),
    (RESPONSES, {"input": "hello", "instructions": "be brief", "store": True}),
    ("/v1/completions", {"prompt": "https://example.com/cat.png"}),  # text that looks like a URL is text
])
def test_media_inline_and_whole_inputs_are_in_the_body(path: str, req: dict[str, Any]) -> None:
    assert unbounded_prompt(req, path) == ""


async def test_a_token_limited_key_is_refused_a_prompt_its_body_does_not_hold(store: Store) -> None:
    quotas = Quotas(store, UsageRecorder(), Clock(), S)
    req = {"model": "m", "input": "and then?", "previous_response_id": "resp_1", "max_output_tokens": 10}
    budget = completion_budget(req, RESPONSES, S)
    limited = _principal(store, "limited", tokens_per_day=1_000_000)
    with pytest.raises(RouterError) as err:
        await quotas.admit(limited, _bytes(req), budget)
    assert err.value.status == 400 and err.value.code == "prompt_not_in_body"
    assert "previous_response_id" in err.value.message and "send the whole input" in err.value.message
    assert store.reserved_tokens(now=0) == 0  # refused before anything was reserved
    # No token limit, nothing to keep: a requests-per-minute limit, or none at all, admits it.
    assert await quotas.admit(_principal(store, "rpm", rpm=10), _bytes(req), budget) is None
    assert await quotas.admit(Principal("k", "free", None, ()), _bytes(req), budget) is None
