"""The ASGI types the raw hot paths (proxy, auth front, landing page) are written against.

The chat, completion and embedding paths skip the framework for speed, so they speak ASGI
directly: a scope dict, a `receive` that yields request messages and a `send` that takes
response messages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ClientGone(Exception):
    """The client closed its connection before its request body arrived."""
