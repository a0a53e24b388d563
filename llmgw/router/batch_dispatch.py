"""How a batch request enters the router: through the proxy's whole path, in process.

A batch request is sent as its key's own (quotas, usage, routing, retries, metrics are
the interactive path's), at `batch` priority so that admission (admission.py) serves it
after interactive traffic and sheds it first. The response is collected whole, for the
runner (batch_runner.py) to record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from llmgw.router.asgi import Message, Scope
from llmgw.router.calls import Call
from llmgw.router.endpoints import match
from llmgw.router.principal import Principal
from llmgw.router.proxy import Proxy
from llmgw.router.responses import ResponseAffinity
from llmgw.store.model import Priority

BATCH_PRIORITY: Priority = "batch"

# dispatch(principal, endpoint path, body) -> (status, headers, response body)
Dispatch = Callable[[Principal, str, bytes], Awaitable[tuple[int, dict[str, str], bytes]]]


def via_proxy(proxy: Proxy, affinity: ResponseAffinity) -> Dispatch:
    """Send one batch request as its key's own: the proxy's whole path (quotas, usage,
    routing, retries, metrics), in process, the response collected whole. The one place
    batch requests enter the router, marked with their priority."""
    async def dispatch(principal: Principal, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        found = match("POST", path)
        assert found is not None, path
        scope: Scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]}
        sent = False
        never = asyncio.Event()  # no client to disconnect: the proxy's watcher waits on this

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}  # pragma: no cover - never set

        status, headers, parts = 500, dict[str, str](), list[bytes]()

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers.update((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))

        # Admitted at batch priority (admission.py): it waits behind interactive requests.
        await proxy.handle(scope, receive, send, principal, Call(scope, receive, found, affinity),
                           priority=BATCH_PRIORITY)
        return status, headers, b"".join(parts)
    return dispatch
