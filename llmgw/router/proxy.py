"""Forwarding one OpenAI request to a replica, and its response back, chunk by chunk.

The path of a request:

1. read the body (bounded), find `model` and `stream`; count the request against its
   groups' quotas (429 when over);
2. resolve the model (aliases), then walk the model and its fallbacks in order, each
   with its replicas least-loaded first; an on-demand model with nothing running is
   started and the request held until it can answer;
3. an attempt that fails before the first response byte (connect error, 502/503/504,
   first-byte timeout, connection dropped) marks the replica failed and moves on;
4. the first byte commits the attempt: status and headers go out, then every chunk as
   it arrives. A failure after that cannot be retried: a stream gets an SSE `error`
   event (the OpenAI SDKs raise it), other bodies are cut off;
5. a client that disconnects cancels the upstream request at once (the engine stops
   generating when its connection closes).

Raw ASGI rather than a framework route: this is the hot path, and the benchmark in
bench/router decides what it may cost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from llmgw.router.auth import Principal
from llmgw.router.errors import Message, Receive, RouterError, Scope, Send, error_body, send_error
from llmgw.router.metrics import RouterMetrics
from llmgw.router.ondemand import OnDemand
from llmgw.router.settings import RouterSettings
from llmgw.router.streaming import SseUsageScanner, usage_of
from llmgw.router.table import ModelEntry, ReplicaRuntime, RoutingTable
from llmgw.router.usage import Clock, UsageRecorder

log = logging.getLogger("llmgw.router")

# Client paths forwarded to the engines, and whether streams there carry usage on request.
PROXY_PATHS: dict[str, bool] = {
    "/v1/chat/completions": True,
    "/v1/completions": True,
    "/v1/embeddings": False,
}

_UPSTREAM_HEADERS = {"Content-Type": "application/json", "Accept": "*/*"}
_RETRYABLE_STATUS = frozenset({502, 503, 504})
_MAX_KEEP = 32 * 1024 * 1024  # largest plain body kept to read its usage
_CLIENT_CLOSED = 499


class _Retry(Exception):
    """This attempt failed before its first byte; try elsewhere."""


class ClientGone(Exception):
    """The client closed its connection before the request body arrived."""


class _Conn:
    """What the disconnect watcher and the request share."""

    __slots__ = ("disconnected", "done", "started")

    def __init__(self) -> None:
        self.done = False
        self.disconnected = False
        self.started = False


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise RouterError(400, "invalid Content-Length") from None
            if declared > limit:
                raise RouterError(413, f"request body is {declared} bytes; the limit is {limit}",
                                  code="request_too_large")
            break
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


def parse_request(body: bytes) -> tuple[dict[str, Any], str]:
    try:
        req = json.loads(body)
    except ValueError:
        raise RouterError(400, "the request body is not valid JSON") from None
    if not isinstance(req, dict):
        raise RouterError(400, "the request body must be a JSON object")
    model = req.get("model")
    if not isinstance(model, str) or not model:
        raise RouterError(400, "you must provide a model parameter", param="model", code="missing_model")
    return req, model


def upstream_body(req: dict[str, Any], raw: bytes, model: str, inject_usage: bool) -> bytes:
    """The body for the engine: the client's bytes, unless the model name or usage must change."""
    if req["model"] == model and not inject_usage:
        return raw
    new = dict(req)
    new["model"] = model
    if inject_usage:
        opts = req.get("stream_options")
        new["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    return json.dumps(new).encode()


def wants_injection(req: dict[str, Any], usage_capable: bool) -> bool:
    """A stream whose client did not ask for usage: ask for it, and strip it again."""
    if not usage_capable or req.get("stream") is not True:
        return False
    opts = req.get("stream_options")
    return not (isinstance(opts, dict) and opts.get("include_usage") is True)


def _tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    prompt = p if isinstance(p, int) else 0
    completion = c if isinstance(c, int) else 0
    if not completion and not prompt:
        t = usage.get("total_tokens")
        prompt = t if isinstance(t, int) else 0
    return prompt, completion


class Proxy:
    def __init__(self, *, settings: RouterSettings, session: aiohttp.ClientSession,
                 table: Callable[[], RoutingTable], metrics: RouterMetrics, recorder: UsageRecorder,
                 clock: Clock, ondemand: OnDemand) -> None:
        self.settings = settings
        self.session = session
        self.table = table
        self.metrics = metrics
        self.recorder = recorder
        self.clock = clock
        self.ondemand = ondemand

    async def handle(self, scope: Scope, receive: Receive, send: Send, principal: Principal,
                     path: str, usage_capable: bool) -> None:
        started = time.perf_counter()
        label = "-"
        status = 500
        conn = _Conn()
        task = asyncio.current_task()
        watcher: asyncio.Task[None] | None = None

        async def watch() -> None:
            message = await receive()
            while message["type"] != "http.disconnect":  # pragma: no cover - body already read
                message = await receive()
            if not conn.done and task is not None:
                conn.disconnected = True
                task.cancel()

        async def tracked_send(message: Message) -> None:
            conn.started = True
            if not message.get("more_body", False) and message["type"] == "http.response.body":
                conn.done = True  # from here on a disconnect is the normal end, not a cancel
            await send(message)

        try:
            body = await read_body(scope, receive, self.settings.max_body_bytes)
            watcher = asyncio.create_task(watch())
            req, name = parse_request(body)
            table = self.table()
            entry = table.resolve(name)
            if entry is None:
                self.metrics.reject("unknown_model")
                raise RouterError(404, f"The model `{name}` does not exist or you do not have access to it.",
                                  code="model_not_found", param="model")
            label = entry.name
            self._admit(principal)
            status = await self._route(table, entry, req, body, path, usage_capable, principal,
                                       tracked_send, started)
        except RouterError as err:
            status = err.status
            if err.status == 429:
                self.metrics.reject("quota")
            if not conn.started:
                await send_error(send, err)
        except ClientGone:
            status = _CLIENT_CLOSED
        except asyncio.CancelledError:
            if not conn.disconnected:
                raise
            t = asyncio.current_task()
            if t is not None:
                t.uncancel()
            status = _CLIENT_CLOSED
        finally:
            conn.done = True
            if watcher is not None:
                watcher.cancel()
            self.metrics.request_done(label, status, time.perf_counter() - started)

    def _admit(self, principal: Principal) -> None:
        now = time.time()
        minute = int(now // 60)
        if principal.quotas:
            day = self.clock.day(now)
            for q in principal.quotas:
                refusal = q.refusal(now, day)
                if refusal is not None:
                    raise refusal
            for q in principal.quotas:
                q.add_request(minute)
        self.recorder.count_request(principal.key_id, minute)

    async def _route(self, table: RoutingTable, entry: ModelEntry, req: dict[str, Any], raw: bytes,
                     path: str, usage_capable: bool, principal: Principal, send: Send,
                     started: float) -> int:
        inject = wants_injection(req, usage_capable)
        tried: set[str] = set()
        attempts = 0
        refusal: RouterError | None = None
        for target in table.chain(entry):
            now = time.monotonic()
            if target.on_demand:
                self.ondemand.touch(target.name)
                if not target.routable(now):
                    try:
                        await self.ondemand.ensure(target.name)
                    except RouterError as err:
                        refusal = refusal or err
                        continue
                    target = self.table().models.get(target.name, target)
            body: bytes | None = None
            while attempts < self.settings.max_attempts:
                replica = target.pick(tried, time.monotonic())
                if replica is None:
                    break
                tried.add(replica.id)
                attempts += 1
                if body is None:
                    body = upstream_body(req, raw, target.name, inject)
                try:
                    return await self._attempt(replica, target.name, path, body, inject,
                                               principal, send, started)
                except _Retry:
                    continue
        if refusal is not None and not tried:
            raise refusal
        what = "no replica could answer" if tried else "no replica is ready"
        raise RouterError(503, f"{what} for model {entry.name!r}; try again shortly",
                          code="no_replica_available", headers={"Retry-After": str(self.settings.retry_after)})

    async def _attempt(self, replica: ReplicaRuntime, model: str, path: str, body: bytes, strip: bool,
                       principal: Principal, send: Send, started: float) -> int:
        settings = self.settings
        replica.begin()
        resp: aiohttp.ClientResponse | None = None
        try:
            try:
                async with asyncio.timeout(settings.first_byte_timeout):
                    resp = await self.session.post(replica.endpoint + path, data=body, headers=_UPSTREAM_HEADERS)
                    if resp.status in _RETRYABLE_STATUS:
                        await resp.read()
                        raise _Retry(f"answered {resp.status}")
                    first = await resp.content.readany()
            except _Retry as exc:
                self._failed(replica, "status", str(exc))
                raise
            except TimeoutError:
                self._failed(replica, "first_byte_timeout", "no first byte within "
                             f"{settings.first_byte_timeout:g} s")
                raise _Retry from None
            except (aiohttp.ClientError, OSError) as exc:
                self._failed(replica, "connect", f"{type(exc).__name__}: {exc}")
                raise _Retry from None
            self.metrics.first_byte(model, time.perf_counter() - started)
            return await self._relay(replica, model, resp, first, strip, principal, send)
        finally:
            replica.end()
            if resp is not None:
                resp.release()

    def _failed(self, replica: ReplicaRuntime, kind: str, why: str) -> None:
        log.warning("replica %s failed: %s", replica.id, why)
        self.metrics.upstream_error(replica.id, kind)
        replica.mark_failure(why, base=self.settings.backoff_base, cap=self.settings.backoff_max)

    async def _relay(self, replica: ReplicaRuntime, model: str, resp: aiohttp.ClientResponse, first: bytes,
                     strip: bool, principal: Principal, send: Send) -> int:
        ctype = resp.headers.get("Content-Type", "application/json")
        sse = ctype.startswith("text/event-stream")
        headers = [(b"content-type", ctype.encode())]
        if sse:
            headers.append((b"cache-control", b"no-cache"))
            headers.append((b"x-accel-buffering", b"no"))
        elif resp.content_length is not None:
            headers.append((b"content-length", str(resp.content_length).encode()))
        scanner = SseUsageScanner(strip=strip) if sse else None
        keep: list[bytes] | None = [] if not sse and resp.status == 200 else None
        kept = 0
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        chunk = first
        loop = asyncio.get_running_loop()
        gap = self.settings.chunk_gap_timeout
        try:
            async with asyncio.timeout(None) as deadline:
                while chunk:
                    if scanner is not None:
                        out = scanner.feed(chunk)
                    else:
                        out = chunk
                        if keep is not None:
                            kept += len(chunk)
                            if kept <= _MAX_KEEP:
                                keep.append(chunk)
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    deadline.reschedule(loop.time() + gap)
                    chunk = await resp.content.readany()
                    deadline.reschedule(None)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            why = (f"no data for {gap:g} s inside the response" if isinstance(exc, TimeoutError)
                   else f"connection lost mid-response: {type(exc).__name__}: {exc}")
            self._failed(replica, "mid_response", why)
            resp.close()
            if not sse:
                raise  # the client sees a cut-off body: nothing truthful can be added
            event = b"data: " + error_body(502, f"the engine serving {model!r} failed mid-stream: {why}",
                                           code="upstream_failed") + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": False})
            self._account(principal, model, scanner.usage if scanner else None)
            return 502
        except asyncio.CancelledError:
            resp.close()  # the client went away: drop the engine connection so it stops generating
            raise
        if scanner is not None:
            await send({"type": "http.response.body", "body": scanner.finish(), "more_body": False})
            usage = scanner.usage
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            usage = None
            if keep and kept <= _MAX_KEEP:
                try:
                    usage = usage_of(json.loads(b"".join(keep)))
                except ValueError:
                    usage = None
        if resp.status == 200:
            self._account(principal, model, usage)
        return resp.status

    def _account(self, principal: Principal, model: str, usage: dict[str, Any] | None) -> None:
        prompt, completion = _tokens(usage)
        now = time.time()
        day = self.clock.day(now)
        self.recorder.add(principal.key_id, day, model, prompt, completion)
        total = prompt + completion
        if total:
            self.metrics.tokens_used(model, prompt, completion)
            for q in principal.quotas:
                q.add_tokens(day, total)


