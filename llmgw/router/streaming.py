"""Watching a response go by for its `usage`, without holding it back.

Usage is what quotas and accounting need, and the engines report it themselves: in
the JSON body of a plain response, and in a final SSE event of a stream when the
request asked for `stream_options.include_usage`. When the client did not ask, the
router asks on its behalf and removes that one event again, so the client sees
exactly the stream it requested.

Chunks are forwarded as they arrive. Only when an event must be removed does the
scanner hold back an incomplete event until its end arrives (an incomplete SSE event
is of no use to a client anyway); every complete event goes out at once.
"""

from __future__ import annotations

import json
from typing import Any

_USAGE = b'"usage"'
_SEP = b"\n\n"


def _event_data(event: bytes) -> bytes | None:
    """The `data:` payload of one SSE event (lines joined), or None if it has none."""
    parts = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    if not parts:
        return None
    return b"\n".join(p.rstrip(b"\r") for p in parts)


def usage_of(obj: Any) -> dict[str, Any] | None:
    """An event's usage: at its top (chat, completions), or in its `response` (the Responses
    API's response.completed event)."""
    if isinstance(obj, dict):
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage:
            return usage
        inner = obj.get("response")
        usage = inner.get("usage") if isinstance(inner, dict) else None
        if isinstance(usage, dict) and usage:
            return usage
    return None


class SseUsageScanner:
    """Feed it upstream chunks; it returns what to send on, and keeps the last usage seen."""

    __slots__ = ("_tail", "strip", "usage")

    def __init__(self, *, strip: bool) -> None:
        self.strip = strip
        self.usage: dict[str, Any] | None = None
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._tail + chunk if self._tail else chunk
        cut = data.rfind(_SEP)
        if cut < 0:
            self._tail = data
            return b"" if self.strip else chunk
        complete, self._tail = data[:cut + 2], data[cut + 2:]
        if _USAGE not in complete:
            return complete if self.strip else chunk
        kept = self._scan(complete)
        return kept if self.strip else chunk

    def finish(self) -> bytes:
        """Whatever is left at the end of the stream (an unterminated last event)."""
        rest, self._tail = self._tail, b""
        if not rest:
            return b""
        if _USAGE in rest:
            kept = self._scan(rest)
            return kept if self.strip else b""
        return rest if self.strip else b""

    def _scan(self, complete: bytes) -> bytes:
        out: list[bytes] = []
        for event in complete.split(_SEP):
            if not event:
                continue
            if _USAGE in event:
                payload = _event_data(event)
                if payload is not None and payload != b"[DONE]":
                    try:
                        obj = json.loads(payload)
                    except ValueError:
                        obj = None
                    usage = usage_of(obj)
                    if usage is not None and isinstance(obj, dict):
                        self.usage = usage
                        if self.strip:
                            if not obj.get("choices"):
                                continue  # the event we asked for on the client's behalf
                            # Usage riding on a content event (llama-server's completions): keep
                            # the content, drop what the client did not ask for.
                            del obj["usage"]
                            event = b"data: " + json.dumps(obj, separators=(",", ":")).encode()
            out.append(event + _SEP)
        return b"".join(out)
