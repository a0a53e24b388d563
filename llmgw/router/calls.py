"""One client request on a forwarded endpoint: its model, its body, and where it may go.

The proxy (proxy.py) runs every endpoint the same way — auth, quotas, attempts, relay,
usage, metrics, drains. What differs per endpoint lives here, in `Call`:

- reading the request: a JSON body (bounded) with `model`; a multipart form (audio),
  whose `model` field is read from the front of the body and the rest streamed to the
  engine as it arrives, never held whole; or nothing but a response id in the path;
- restricting the routing: only replicas whose engine serves the endpoint
  (endpoints.py), and for a response id or `previous_response_id` only the replica that
  produced it (responses.py), with a clear error when it is gone;
- the upstream request for one replica: method, the engine's path, body, headers;
- noticing the response id of a Responses API answer as it goes out to the client.

Why long: one `Call` per way a request arrives (JSON, multipart form, response id),
side by side so the proxy treats every endpoint alike.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

from llmgw.router.asgi import ClientGone, Message, Receive, Scope, Send
from llmgw.router.balance import prefix_key
from llmgw.router.bodies import content_length, find_field, header, multipart_boundary, read_body
from llmgw.router.endpoints import Endpoint, Match, served, upstream_path
from llmgw.router.openai_errors import RouterError
from llmgw.router.responses import Produced, ResponseAffinity
from llmgw.router.table import ModelEntry, ReplicaRuntime, RoutingTable

_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "*/*"}
_ACCEPT = {"Accept": "*/*"}
_KEEP_FOR_ID = 8 * 1024 * 1024  # the most of a plain Responses body kept to read its id


class _Restricted(RoutingTable):
    """The routing table as one request sees it: only the chain the proxy may try.

    It does not build a table (no `super().__init__`): the proxy reads `chain()` alone.
    """

    def __init__(self, chain: list[ModelEntry]) -> None:
        self._chain = chain

    def chain(self, entry: ModelEntry) -> list[ModelEntry]:
        return self._chain


# Per table: the chains restricted to an endpoint, kept so that their entries keep
# spreading ties between replicas (each entry's rotation) across requests.
_views: weakref.WeakKeyDictionary[RoutingTable, dict[tuple[str, str], list[ModelEntry] | None]] = \
    weakref.WeakKeyDictionary()


def _serves(replica: ReplicaRuntime, endpoint: Endpoint) -> bool:
    return upstream_path(replica.record.engine, endpoint) is not None


class Call:
    """One client request on a forwarded endpoint, carried by the proxy through its attempts."""

    __slots__ = ("_boundary", "_content_type", "_field", "_length", "_limit", "_more", "_prefix", "_read_all",
                 "_seen", "_seen_size", "_sent", "_sse", "_status", "_upload_error", "_uploaded", "affinity",
                 "endpoint", "model", "pin", "raw", "receive", "replica", "req", "response_id", "scope")

    def __init__(self, scope: Scope, receive: Receive, match: Match, affinity: ResponseAffinity) -> None:
        self.scope = scope
        self.receive = receive
        self.endpoint = match.endpoint
        self.response_id = match.response_id
        self.affinity = affinity
        self.req: dict[str, Any] = {}
        self.raw = b""
        self.model = ""
        self.pin: Produced | None = None
        self.replica: ReplicaRuntime | None = None  # the replica of the latest attempt
        self._read_all = False  # the whole request body was read from the client
        self._uploaded: asyncio.Event | None = None  # made only for a watcher that must wait for that
        self._content_type: str | None = None
        self._boundary = b""
        self._field: tuple[int, int] = (0, 0)
        self._more = False  # the multipart body goes on past what was read
        self._length: int | None = None
        self._limit = 0
        self._sent = False  # the streamed body started going to an engine: no second attempt
        self._upload_error: ClientGone | RouterError | None = None
        self._status = 0
        self._sse = False
        self._seen: list[bytes] = []
        self._seen_size = 0
        self._prefix: tuple[int | None] | None = None  # the prompt's prefix key, once worked out

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    # -- reading ------------------------------------------------------------------------
    async def read(self, limit: int) -> None:
        """Read a request whose body is not JSON: a multipart form's front, or none at all."""
        if self.endpoint.body == "multipart":
            await self._read_form_front(limit)
            return
        self.raw = await read_body(self.scope, self.receive, limit)
        self._read_all = True
        assert self.response_id is not None
        self.pin = self.affinity.get(self.response_id)
        if self.pin is None:
            raise RouterError(404, f"No response with id '{self.response_id}' is known to this router (it "
                                   "remembers the responses it relayed since it started)",
                              code="response_not_found")
        self.model = self.pin.model
        self.req = {"model": self.model}

    def parsed(self, req: dict[str, Any], raw: bytes, model: str) -> None:
        """The JSON request as the proxy parsed it; a `previous_response_id` pins its replica."""
        self.req, self.raw, self.model = req, raw, model
        self._read_all = True
        previous = req.get("previous_response_id") if self.endpoint.usage == "responses" else None
        if previous is not None:
            if not isinstance(previous, str) or not previous:
                raise RouterError(400, "previous_response_id must be a response id string",
                                  param="previous_response_id")
            self.pin = self.affinity.get(previous)
            if self.pin is None:
                raise RouterError(404, f"Previous response with id '{previous}' not found: this router does not "
                                       "know it (it remembers the responses it relayed since it started); "
                                       "send the conversation without previous_response_id",
                                  code="previous_response_not_found", param="previous_response_id")

    async def _read_form_front(self, limit: int) -> None:
        """Read the multipart body up to the end of its `model` field; the rest streams later."""
        self._content_type = header(self.scope, b"content-type")
        self._boundary = multipart_boundary(self._content_type)
        self._length = content_length(self.scope)
        if self._length is not None and self._length > limit:
            raise RouterError(413, f"request body is {self._length} bytes; the limit is {limit}",
                              code="request_too_large")
        self._limit = limit
        buf = bytearray()  # grows in place: a model field after a large file costs no copies
        more = True
        while True:
            found = find_field(buf, self._boundary, "model")
            if isinstance(found, tuple):
                break
            if not found or not more:
                raise RouterError(400, "you must provide a model parameter (a `model` field in the form)",
                                  param="model", code="missing_model")
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            buf += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(buf) > limit:
                raise RouterError(413, f"request body is over the limit of {limit} bytes", code="request_too_large")
        start, end = found
        try:
            self.model = buf[start:end].decode("utf-8").strip()
        except UnicodeDecodeError:
            self.model = ""
        if not self.model:
            raise RouterError(400, "you must provide a model parameter", param="model", code="missing_model")
        self.raw, self._field, self._more = bytes(buf), (start, end), more
        self.req = {"model": self.model}
        self._read_all = not more

    async def receive_after_upload(self) -> Message:
        """The client's next message once its body is read (the disconnect watcher's receive)."""
        if not self._read_all:
            if self._uploaded is None:
                self._uploaded = asyncio.Event()
            await self._uploaded.wait()
        return await self.receive()

    # -- routing ------------------------------------------------------------------------
    def prefix_key(self) -> int | None:
        """The ring point of the prompt's head (balance.py), from the parsed body, once."""
        if self._prefix is None:
            self._prefix = (prefix_key(self.endpoint.key, self.req),)
        return self._prefix[0]

    def resolve(self, table: RoutingTable) -> ModelEntry | None:
        """The model entry, after checking that a pinned replica is still there to answer."""
        pin = self.pin
        if pin is not None:
            replica = table.replicas.get(pin.replica)
            if replica is None or replica.state != "ready":
                what = ("previous response" if self.response_id is None else "response")
                rid = self.response_id or self.req.get("previous_response_id")
                gone = "is gone" if replica is None else f"is {replica.state}"
                raise RouterError(404, f"The {what} '{rid}' was produced by replica {pin.replica} of model "
                                       f"{pin.model!r}, which {gone}: the engine kept it in its memory, so it "
                                       "cannot be continued or fetched; start again without it",
                                  code="previous_response_not_found" if self.response_id is None
                                  else "response_not_found",
                                  param="previous_response_id" if self.response_id is None else None)
        return table.resolve(self.model)

    def restrict(self, table: RoutingTable, entry: ModelEntry) -> RoutingTable:
        """What the proxy may try: the pinned replica, or the replicas serving this endpoint."""
        endpoint = self.endpoint
        if self.pin is not None:
            replica = table.replicas[self.pin.replica]
            if entry.name != self.pin.model:
                raise RouterError(400, f"response '{self.response_id or self.req.get('previous_response_id')}' "
                                       f"was produced by model `{self.pin.model}`, whose replica alone keeps it: "
                                       f"continue it with that model, not `{entry.name}`", param="model",
                                  code="model_mismatch")
            if not _serves(replica, endpoint):
                raise self.not_served(entry, [replica.record.engine])
            # That replica alone: no fallbacks, and never an on-demand start of another one.
            record = entry.record
            alone = record.model_copy(update={"fallbacks": [], "scaling": record.scaling.model_copy(
                update={"min": max(1, record.scaling.min)})})
            return _Restricted([ModelEntry(alone, [replica], adapter=entry.adapter, base=entry.base)])
        views = _views.get(table)
        if views is None:
            views = _views[table] = {}
        key = (entry.name, endpoint.key)
        if key not in views:  # once per table, model and endpoint: the hot path only looks it up
            chain = table.chain(entry)
            if all(_serves(r, endpoint) for e in chain for r in e.replicas):
                views[key] = None  # the usual case: every replica serves it, nothing to copy
            elif entry.replicas and not any(_serves(r, endpoint) for r in entry.replicas):
                views[key] = []
            else:
                views[key] = [
                    e if not e.replicas else ModelEntry(e.record, [r for r in e.replicas if _serves(r, endpoint)],
                                                        adapter=e.adapter, base=e.base)
                    for e in chain if not e.replicas or any(_serves(r, endpoint) for r in e.replicas)]
        restricted = views[key]
        if restricted is None:
            return table
        if not restricted:
            raise self.not_served(entry, [r.record.engine for r in entry.replicas])
        return _Restricted(restricted)

    def not_served(self, entry: ModelEntry, engines: list[str]) -> RouterError:
        names = sorted(set(engines))
        return RouterError(404, f"model `{entry.name}` does not serve {self.endpoint.key} (its engine "
                                f"{', '.join(names)} serves: {', '.join(served(names)) or 'nothing'})",
                           code="endpoint_not_supported")

    # -- one attempt --------------------------------------------------------------------
    def upstream(self, replica: ReplicaRuntime, body: bytes) -> tuple[str, str, Any, dict[str, str]]:
        """Method, URL, body and headers of the request to `replica`; remembers it as the one tried."""
        self.replica = replica
        endpoint = self.endpoint
        path = upstream_path(replica.record.engine, endpoint, self.response_id) or self.path
        url = replica.endpoint + path
        # Fresh header dicts: the caller adds the replica's own engine key to them.
        if endpoint.body == "json":
            return endpoint.method, url, body, dict(_JSON_HEADERS)
        if endpoint.body == "none":
            return endpoint.method, url, (self.raw or None) if endpoint.method == "POST" else None, dict(_ACCEPT)
        if self._sent:
            raise RouterError(502, f"the engine serving {replica.model!r} failed while the upload was streaming "
                                   "to it; send the request again", code="upstream_failed")
        front = self.raw
        if replica.model != self.model:  # an alias or a fallback: the engine knows its own name
            start, end = self._field
            front = front[:start] + replica.model.encode() + front[end:]
        headers = {"Content-Type": self._content_type or "", "Accept": "*/*"}
        if self._length is not None:
            headers["Content-Length"] = str(self._length + len(front) - len(self.raw))
        return endpoint.method, url, self._upload(front), headers

    async def _upload(self, front: bytes) -> AsyncIterator[bytes]:
        self._sent = True
        yield front
        size = len(self.raw)
        more = self._more
        while more:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self._upload_error = ClientGone()
                raise self._upload_error
            chunk = message.get("body", b"")
            more = bool(message.get("more_body", False))
            size += len(chunk)
            if size > self._limit:
                self._upload_error = RouterError(413, f"request body is over the limit of {self._limit} bytes",
                                                 code="request_too_large")
                raise self._upload_error
            if chunk:
                yield chunk
        self._read_all = True
        if self._uploaded is not None:
            self._uploaded.set()

    def raise_upload_error(self) -> None:
        """Raise what broke the client's upload, if it did: the engine request failed
        because of the client (gone, or over the limit), not because of the engine.

        aiohttp reports an exception raised inside a streamed body as its own
        connection error, so the proxy asks here before blaming the replica.
        """
        if self._upload_error is not None:
            raise self._upload_error

    # -- the answer ---------------------------------------------------------------------
    def billable(self, usage: dict[str, Any] | None) -> dict[str, Any] | None:
        """The usage to count: none for a stored response fetched or cancelled by id (its
        `usage` was counted when it was made)."""
        return None if self.endpoint.by_response_id else usage

    def watch(self, send: Send) -> Send:
        """`send`, or for the Responses API a `send` that notes the response id going by."""
        if self.endpoint.key == "POST /v1/responses":
            return self._send_noting_id(send)
        if self.endpoint.key == "DELETE /v1/responses/{id}":
            async def forgetting(message: Message) -> None:
                if message["type"] == "http.response.start" and message["status"] == 200:
                    assert self.response_id is not None
                    self.affinity.forget(self.response_id)
                await send(message)
            return forgetting
        return send

    def _send_noting_id(self, send: Send) -> Send:
        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._status = int(message["status"])
                ctype = dict(message.get("headers", [])).get(b"content-type", b"")
                self._sse = bytes(ctype).startswith(b"text/event-stream")
            elif self._status == 200 and self._seen_size >= 0:
                self._note(message.get("body", b""), not message.get("more_body", False))
            await send(message)
        return noting

    def _note(self, chunk: bytes, last: bool) -> None:
        self._seen.append(chunk)
        self._seen_size += len(chunk)
        if not self._sse and not last and self._seen_size < _KEEP_FOR_ID:
            return  # a plain body is read whole, once, at its end
        data = b"".join(self._seen)
        if self._sse:
            data = data.replace(b"\r\n", b"\n")  # only the first event is ever read: small
            end = data.find(b"\n\n")
            if end < 0 and not last and self._seen_size < _KEEP_FOR_ID:
                return
            event = data[:end] if end >= 0 else data
            payload = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            obj = _loads(payload)
            found = obj.get("response") if isinstance(obj, dict) else None
            self._remember(found.get("id") if isinstance(found, dict) else None)
        elif last or self._seen_size >= _KEEP_FOR_ID:
            obj = _loads(data) if last else None
            self._remember(obj.get("id") if isinstance(obj, dict) else None)
        else:
            return
        self._seen, self._seen_size = [], -1  # done: look no further

    def _remember(self, response_id: object) -> None:
        if isinstance(response_id, str) and response_id and self.replica is not None:
            self.affinity.remember(response_id, self.replica.id, self.replica.model)


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None
