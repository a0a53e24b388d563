"""Every error the router returns, in the OpenAI error shape.

Clients are OpenAI SDKs: they read `{"error": {"message", "type", "param", "code"}}`
and the HTTP status, so every refusal — auth, quota, unknown model, nothing to serve —
uses that shape, on every path, streamed or not.
"""

from __future__ import annotations

import json
from typing import Any

from llmgw.router.asgi import Send

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_error",
}


class RouterError(Exception):
    """A refusal to send to the client: status, message, OpenAI code and extra headers."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 headers: dict[str, str] | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}
        self.param = param

    def body(self) -> bytes:
        return error_body(self.status, self.message, code=self.code, param=self.param)


def error_body(status: int, message: str, *, code: str | None = None, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": _TYPES.get(status, "server_error"),
                                 "param": param, "code": code}}).encode()


def error_payload(status: int, message: str, *, code: str | None = None) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(error_body(status, message, code=code))
    return loaded


async def send_error(send: Send, err: RouterError) -> None:
    body = err.body()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
