"""Reading request bodies, bounded: a whole JSON body, or the front of a multipart form.

A JSON body is read whole (at most `max_body_bytes`) before anything is routed. A
multipart form (audio) is read only up to the end of its `model` field, which is all
routing needs; calls.py streams the rest to the engine as it arrives. Both refuse a
declared or actual size over the limit with 413 before the body is held.
"""

from __future__ import annotations

import re

from llmgw.router.asgi import ClientGone, Receive, Scope
from llmgw.router.openai_errors import RouterError


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    declared = content_length(scope)
    if declared is not None and declared > limit:
        raise RouterError(413, f"request body is {declared} bytes; the limit is {limit}", code="request_too_large")
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise RouterError(413, f"request body is over the limit of {limit} bytes",
                                  code="request_too_large")
            parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                raise RouterError(400, "invalid Content-Length") from None
    return None


def header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value).decode("latin-1")
    return None


# -- multipart --------------------------------------------------------------------------
_BOUNDARY = re.compile(r'boundary="?([^";]{1,200})"?', re.IGNORECASE)
_NAME = re.compile(rb'(?i)content-disposition:[^\r\n]*?\bname="([^"]*)"')


def multipart_boundary(content_type: str | None) -> bytes:
    if not content_type or not content_type.lower().startswith("multipart/form-data"):
        raise RouterError(400, "this endpoint takes a multipart/form-data body (a file and a `model` field)")
    m = _BOUNDARY.search(content_type)
    if m is None:
        raise RouterError(400, "the multipart/form-data Content-Type has no boundary")
    return m.group(1).encode("latin-1")


def find_field(buf: bytes | bytearray, boundary: bytes, field: str) -> tuple[int, int] | bool:
    """Where `field`'s value lies in the front of a multipart body: (start, end).

    False when the body's end was reached without it, True when more is needed.
    """
    delim = b"--" + boundary
    pos = buf.find(delim)
    if pos < 0:
        return True  # nothing or a preamble yet: read on (the caller bounds it)
    wanted = field.encode()
    while True:
        pos += len(delim)
        if len(buf) < pos + 2:
            return True
        if buf[pos:pos + 2] == b"--":
            return False  # the closing delimiter
        head_end = buf.find(b"\r\n\r\n", pos)
        if head_end < 0:
            return True
        name = _NAME.search(buf, pos, head_end)
        start = head_end + 4
        end = buf.find(b"\r\n" + delim, start)
        if end < 0:
            return True
        if name is not None and name.group(1) == wanted:
            return start, end
        pos = end + 2
