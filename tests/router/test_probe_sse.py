"""The SSE reader the bench and the checks share: what a line yields, and when a stream is whole."""

from __future__ import annotations

import pytest

from llmgw.probe.sse import SseChunks


def test_chunks_comments_and_done() -> None:
    stream = SseChunks()
    assert stream.feed(": keep-alive") is None  # the router's keep-alive comment
    assert stream.feed("") is None
    assert stream.feed('data: {"choices": [{"delta": {"content": "hi"}}]}') == {
        "choices": [{"delta": {"content": "hi"}}]}
    assert not stream.done
    assert stream.feed("data: [DONE]") is None
    assert stream.done
    # Nothing after [DONE] counts.
    assert stream.feed('data: {"late": true}') is None


@pytest.mark.parametrize("line", ["data: {not json", "data: [1, 2]", 'data: "text"'])
def test_a_data_line_that_is_no_json_object_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        SseChunks().feed(line)
