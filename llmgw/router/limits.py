"""What one client may hold of the router: bounded headers, bounded time, bounded connections.

uvicorn's httptools protocol buffers a request's URL and headers without limit and
has no timer on a request still arriving, so one client streaming a header grows the
router by every byte it sends, and a slow or silent one keeps its connection for ever.
`LimitedHttp` is that protocol with the limits of `RouterSettings` (server.py uses it
for every listener):

- request line and headers: at most `max_header_bytes` (counted before the parser sees
  them, so nothing beyond the limit is ever buffered) and `max_headers` -> 431;
- `header_timeout` from a request's first byte to its last header, then `body_timeout`
  to the end of its body -> 408 (or a closed connection once a response started);
- and a body still arriving must keep up `body_min_rate` bytes a second on average,
  checked every `body_check_interval` seconds from the end of its headers -> 408. A fixed
  deadline alone lets a client that sends a few bytes every couple of seconds hold a
  connection for all of `body_timeout` (a minute by default, which a large upload on a
  slow link needs), and a few thousand such clients hold every connection the router
  takes; at the minimum rate each costs its sender real bandwidth. A body the router
  itself stopped reading (an upload streamed to a busy engine, uvicorn's flow control)
  is not the client's fault: that check is skipped, the deadline still holds;
- `keep_alive_timeout` for an idle connection, from the moment it opens;
- `max_connections` open at once per listener -> 503 to the next one.

Every refusal is an OpenAI-style JSON error with `connection: close`. `guard` wraps an
ASGI app so an exception that escapes it gives the same JSON 500, never uvicorn's plain
text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from llmgw.router.asgi import Receive, Scope, Send
from llmgw.router.openai_errors import error_body
from llmgw.router.settings import RouterSettings

log = logging.getLogger("llmgw.router")


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing a refused request."""


def refusal_bytes(status: int, message: str, code: str) -> bytes:
    body = error_body(status, message, code=code)
    return b"".join([STATUS_LINE[status], b"content-type: application/json\r\n",
                     b"content-length: ", str(len(body)).encode(), b"\r\n",
                     b"connection: close\r\n\r\n", body])


class LimitedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the router's limits (see the module docstring)."""

    limits: ClassVar[RouterSettings] = RouterSettings()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.keep_alive_timeout  # type: ignore[assignment]  # a float is fine for call_later
        self._head_bytes = 0  # bytes of the request line and headers fed so far
        self._in_head = True  # between requests or inside a request's headers
        self._header_count = 0
        self._refused = False
        self._phase: asyncio.TimerHandle | None = None
        self._body_bytes = 0  # of the request whose body is arriving
        self._body_from = 0.0  # loop time its headers ended

    @classmethod
    def with_limits(cls, settings: RouterSettings) -> type[LimitedHttp]:
        return type("LimitedHttp", (cls,), {"limits": settings})

    # -- connections -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, f"the router holds its limit of {self.limits.max_connections} connections; "
                              "try again shortly", "too_many_connections")
            return
        # uvicorn arms the idle timer only after a response: a silent new connection would stay.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                            self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_phase()
        super().connection_lost(exc)

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer `status` (unless a response already started) and close the connection."""
        if self._refused:
            return
        self._refused = True
        self._cancel_phase()
        self._unset_keepalive_if_required()
        cycle = self.cycle
        started = cycle is not None and not cycle.response_complete and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's later sends go nowhere; its receive sees a disconnect
            cycle.message_event.set()
        if not self.transport.is_closing():
            if not started:
                self.transport.write(refusal_bytes(status, message, code))
            self.transport.close()

    # -- phase timers --------------------------------------------------------------------
    def _cancel_phase(self) -> None:
        if self._phase is not None:
            self._phase.cancel()
            self._phase = None

    def _arm(self, seconds: float, what: str) -> None:
        self._cancel_phase()
        self._phase = self.loop.call_later(seconds, self._expired, seconds, what)

    def _expired(self, seconds: float, what: str) -> None:
        self._phase = None
        log.info("closing a connection from %s: its %s took over %g s", _peer(self.client), what, seconds)
        self._refuse(408, f"the request's {what} did not arrive within {seconds:g} s", "request_timeout")

    def _arm_body_check(self) -> None:
        """The next look at the arriving body: its rate, or its deadline, whichever is first."""
        limits = self.limits
        elapsed = self.loop.time() - self._body_from
        if elapsed >= limits.body_timeout:
            self._expired(limits.body_timeout, "body")
            return
        wait = min(limits.body_check_interval, limits.body_timeout - elapsed)
        self._cancel_phase()
        self._phase = self.loop.call_later(wait, self._check_body)

    def _check_body(self) -> None:
        self._phase = None
        limits = self.limits
        elapsed = self.loop.time() - self._body_from
        if elapsed < limits.body_timeout and not self.flow.read_paused \
                and self._body_bytes < limits.body_min_rate * elapsed:
            rate = self._body_bytes / max(elapsed, 1e-9)
            log.info("closing a connection from %s: its body came at %.0f bytes/s, under %g",
                     _peer(self.client), rate, limits.body_min_rate)
            self._refuse(408, f"the request's body arrived at {rate:.0f} bytes/s, under the minimum of "
                              f"{limits.body_min_rate:g}: send it at once", "request_timeout")
            return
        self._arm_body_check()

    # -- input -----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._refused or self.parser is None or self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        while data and not self._refused:
            if self._in_head:
                room = self.limits.max_header_bytes - self._head_bytes
                if room <= 0:
                    self._refuse(431, f"request line and headers over {self.limits.max_header_bytes} bytes",
                                 "request_header_fields_too_large")
                    return
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
            else:
                piece, data = data, b""
            if not self._feed(piece):
                return
            # A piece that ended the headers may hold body or a next request: loop on the rest.

    def _feed(self, piece: bytes) -> bool:
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported here", "invalid_request")
            return False
        except httptools.HttpParserError:
            if not self._refused:
                self._refuse(400, "invalid HTTP request", "invalid_request")
            return False
        return not self._refused

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, msg, "invalid_request")

    # -- parser callbacks --------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._header_count = 0
        self._arm(self.limits.header_timeout, "headers")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refuse(431, f"more than {self.limits.max_headers} request headers",
                         "request_header_fields_too_large")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._body_bytes = 0
        self._body_from = self.loop.time()
        self._arm_body_check()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)  # the body's own bytes: chunk framing is no progress
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel_phase()
        self._in_head = True
        super().on_message_complete()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


def guard(app: Any) -> Any:
    """`app`, with any exception that escapes it answered as an OpenAI-style JSON 500."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await app(scope, receive, tracking_send)
        except Exception:
            if scope.get("type") != "http" or started:
                raise
            log.exception("unexpected error answering %s %s", scope.get("method"), scope.get("path"))
            body = error_body(500, "the router failed to answer this request; see its log", code="internal_error")
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body, "more_body": False})

    return guarded
