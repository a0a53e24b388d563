"""Reading an OpenAI-style server-sent event stream, one line at a time.

The bench (async, many streams) and the checks (sync, one stream) read the same format:
`data: {json}` lines, other fields and comments (the router's keep-alives) ignored, and a
final `data: [DONE]` that marks a stream that ended as it should rather than broken off.
"""

from __future__ import annotations

import json
from typing import Any


class SseChunks:
    """Feed it each line of the body; it answers the JSON chunk a line carries, if any."""

    def __init__(self) -> None:
        self.done = False  # [DONE] arrived: the stream ended whole

    def feed(self, line: str) -> dict[str, Any] | None:
        """The chunk on a `data:` line; None for anything else and for [DONE] (then `done`).

        Raises ValueError when a data line is not a JSON object.
        """
        if self.done or not line.startswith("data:"):
            return None
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return None
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError("a stream chunk is not a JSON object")
        return chunk
