"""The SSE usage scanner: usage found however the stream is cut, and stripped only when asked."""

from __future__ import annotations

import json

import pytest

from llmgw.router.proxy import upstream_body, wants_injection
from llmgw.router.streaming import SseUsageScanner

CHUNKS = [
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n',
    b"data: [DONE]\n\n",
]
STREAM = b"".join(CHUNKS)


def feed_all(scanner: SseUsageScanner, pieces: list[bytes]) -> bytes:
    return b"".join(scanner.feed(p) for p in pieces) + scanner.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 50, 1000])
def test_usage_found_and_stream_untouched_when_client_asked(size: int) -> None:
    pieces = [STREAM[i:i + size] for i in range(0, len(STREAM), size)]
    s = SseUsageScanner(strip=False)
    out = b"".join(s.feed(p) for p in pieces)  # forwarded exactly as it came, chunk for chunk
    assert out == STREAM
    assert s.finish() == b""
    assert s.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


@pytest.mark.parametrize("size", [1, 5, 13, 64, 1000])
def test_injected_usage_event_is_removed_and_nothing_else(size: int) -> None:
    pieces = [STREAM[i:i + size] for i in range(0, len(STREAM), size)]
    s = SseUsageScanner(strip=True)
    out = feed_all(s, pieces)
    assert out == CHUNKS[0] + CHUNKS[1] + CHUNKS[3]
    assert s.usage is not None and s.usage["total_tokens"] == 5


def test_complete_events_go_out_at_once_when_stripping() -> None:
    s = SseUsageScanner(strip=True)
    assert s.feed(CHUNKS[0]) == CHUNKS[0]
    assert s.feed(CHUNKS[1][:10]) == b""  # half an event is held back...
    assert s.feed(CHUNKS[1][10:]) == CHUNKS[1]  # ...until its end arrives


def test_usage_inside_a_content_chunk_is_counted_and_removed_only_when_injected() -> None:
    """llama-server's completions put usage on the last content event: keep the content."""
    event = (b'data: {"choices":[{"text":"z","finish_reason":"length"}],'
             b'"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n')
    s = SseUsageScanner(strip=True)
    out = feed_all(s, [event, b"data: [DONE]\n\n"])
    assert out == b'data: {"choices":[{"text":"z","finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    assert s.usage == {"prompt_tokens": 1, "completion_tokens": 1}
    kept = SseUsageScanner(strip=False)
    assert feed_all(kept, [event]) == event and kept.usage is not None


def test_content_mentioning_usage_is_not_mistaken() -> None:
    event = b'data: {"choices":[{"delta":{"content":"the \\"usage\\" word"}}]}\n\n'
    s = SseUsageScanner(strip=True)
    assert feed_all(s, [event]) == event
    assert s.usage is None


def test_unterminated_last_event_is_flushed() -> None:
    s = SseUsageScanner(strip=True)
    assert feed_all(s, [CHUNKS[0], b"data: [DONE]"]) == CHUNKS[0] + b"data: [DONE]"


def test_injection_only_for_streams_without_usage() -> None:
    assert wants_injection({"stream": True}, True)
    assert wants_injection({"stream": True, "stream_options": {"include_usage": False}}, True)
    assert not wants_injection({"stream": True, "stream_options": {"include_usage": True}}, True)
    assert not wants_injection({"stream": False}, True)
    assert not wants_injection({"stream": True}, False)  # embeddings


def test_upstream_body_keeps_client_bytes_unless_it_must_change() -> None:
    raw = b'{"model": "m", "stream": true, "x": 1}'
    req = json.loads(raw)
    assert upstream_body(req, raw, "m", False) is raw
    changed = json.loads(upstream_body(req, raw, "other", True))
    assert changed == {"model": "other", "stream": True, "x": 1, "stream_options": {"include_usage": True}}
    assert req == json.loads(raw)  # the parsed request is not modified in place
