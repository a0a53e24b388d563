"""Forwarding one OpenAI request to a replica, and its response back, chunk by chunk.

The path of a request:

1. read the body (bounded), find `model` and `stream`; count the request against its
   groups' quotas (429 when over). What differs per endpoint is the request's `Call`
   (calls.py): a multipart form read only up to its `model`, a response id that pins
   the replica, the engine's own path for the endpoint. Under a token limit the
   completion budget reserved is written into the forwarded body (quotas.py), so the
   engine generates no more than was counted;
2. resolve the model (aliases), then walk the model and its fallbacks in order, each
   with its replicas least-loaded first; an on-demand model with nothing running is
   started and the request held until it can answer. A weighted route walks its targets,
   the one this key and conversation are placed on first (routes.py), and a canary's 5xx
   is retried on the others;
3. an attempt that fails before the first response byte (connect error, 502/503/504,
   first-byte timeout, connection dropped) counts a failure against the replica and
   moves on (table.py decides when failures eject it). A failure that is not the
   replica's fault — the request could not be written into a pooled keep-alive
   connection the engine had closed, or the engine dropped that connection before any
   response byte — is retried on a fresh connection (to the same replica when it is the
   only one) and counts against nothing. When every ready replica is ejected they are
   tried anyway (panic mode). One deadline covers all attempts (`request_timeout`), and
   a replica that timed out is never tried again for the same request;
4. the first byte commits the attempt: status and headers go out, then every chunk as
   it arrives. A failure after that cannot be retried: a stream gets an SSE `error`
   event (the OpenAI SDKs raise it), other bodies are cut off;
5. a client that disconnects cancels the upstream request at once (the engine stops
   generating when its connection closes).

Raw ASGI rather than a framework route: this is the hot path, and the benchmark in
bench/router decides what it may cost.

Why long: the path above is one sequence of awaits over one request's state (attempts,
relay, usage, drains); split, each step would pass that state around.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from llmgw.router.adapters import EngineAsk, engine_ask
from llmgw.router.admission import (
    ADMISSION_CODES,
    PRIORITY_HEADER,
    Admission,
    Slot,
    replica_slots,
    requested_priority,
    takes_slot,
)
from llmgw.router.asgi import ClientGone, Receive, Scope, Send
from llmgw.router.bodies import read_body
from llmgw.router.calls import Call
from llmgw.router.engine_keys import EngineKeys
from llmgw.router.lora import Choice, RuntimeLoras, runtime_path
from llmgw.router.metrics import RouterMetrics
from llmgw.router.ondemand import HeldStream, OnDemand
from llmgw.router.openai_errors import RouterError, error_body, send_error
from llmgw.router.principal import Principal
from llmgw.router.quotas import Budget, Quotas, completion_budget
from llmgw.router.routes import RouteRuntime
from llmgw.router.settings import RouterSettings
from llmgw.router.streaming import SseUsageScanner
from llmgw.router.table import ChainView, EjectionPolicy, ModelEntry, ReplicaRuntime, RoutingTable
from llmgw.router.tokenize import PromptCounter
from llmgw.router.usage import Clock, UsageRecorder
from llmgw.store.model import Priority

log = logging.getLogger("llmgw.router")

_RETRYABLE_STATUS = frozenset({502, 503, 504})
# A weighted route's canary that answers any 5xx is retried on the other targets (the stable
# one first): a canary's failure must not reach the client while the stable model can answer.
_CANARY_RETRYABLE = frozenset(range(500, 600))
_MAX_KEEP = 32 * 1024 * 1024  # largest plain body kept to read its usage
_CLIENT_CLOSED = 499
_USAGE_KEY = '"usage"'
_decoder = json.JSONDecoder()


def usage_in_json(body: bytes) -> dict[str, Any] | None:
    """The top-level `usage` object of a JSON response, without parsing the rest of it.

    Engines put `usage` once, at the top level; the last occurrence is the one (a
    completion's text could mention the word, but only inside a string before it).
    """
    text = body.decode("utf-8", "replace")
    at = text.rfind(_USAGE_KEY)
    while at >= 0:
        colon = at + len(_USAGE_KEY)
        while colon < len(text) and text[colon] in " \t\r\n":
            colon += 1
        if colon < len(text) and text[colon] == ":":
            start = colon + 1
            while start < len(text) and text[start] in " \t\r\n":
                start += 1
            try:
                value, _ = _decoder.raw_decode(text, start)
            except ValueError:
                value = None
            if isinstance(value, dict):
                return value
        at = text.rfind(_USAGE_KEY, 0, at)
    return None


class _CutOff(Exception):
    """A plain (non-SSE) body broke off after it started: the connection must be dropped."""


class _Retry(Exception):
    """This attempt failed before its first byte; try elsewhere."""


class _Stale(Exception):
    """The pooled connection was dead before the engine could have read the request: not
    the replica's fault; try again on a fresh connection."""


class _Reload(Exception):
    """The engine does not know an adapter the router loaded there (it restarted in place, or
    another router worker unloaded it): forgotten, so the next pick loads it again."""


class _Deadline(Exception):
    """The request's overall deadline passed before any replica answered."""


_NEVER = float("inf")


class Flight:
    """One request in flight, as the watchdog sees it.

    Per-request timers and tasks cost more than the rest of the hot path together, so
    there are none: the proxy writes a deadline here as it moves through the phases
    (first byte, then each gap between chunks), and one watchdog loop cancels the
    requests whose deadline passed. The same loop gives a request that is still
    running after `WATCH_AFTER` seconds a task that waits for its client to disconnect;
    quick requests never need one.
    """

    __slots__ = ("call", "deadline", "done", "reason", "receive", "route", "slot", "started", "task", "watcher")

    def __init__(self, task: asyncio.Task[Any] | None, receive: Receive, started: float, call: Call) -> None:
        self.call = call  # what differs per endpoint: body, engine path, pinned replica
        self.task = task
        self.receive = receive
        self.started = started  # monotonic
        self.deadline = _NEVER
        self.reason: str | None = None  # why the watchdog or the watcher cancelled: timeout|disconnect
        self.done = False  # the response is complete: a disconnect now is the normal end
        self.watcher: asyncio.Task[None] | None = None
        self.slot: Slot | None = None  # its hold on one of the model's slots (admission.py)
        self.route: tuple[RouteRuntime, str] | None = None  # a weighted route and the target now tried

    def cancel(self, reason: str) -> None:
        if self.reason is None and not self.done and self.task is not None:
            self.reason = reason
            self.task.cancel()

    def absorb(self) -> None:
        """Our own cancellation was handled: let the task carry on."""
        if self.task is not None:
            self.task.uncancel()

    async def watch(self) -> None:
        message = await self.receive()
        while message["type"] != "http.disconnect":  # pragma: no cover - the body was read already
            message = await self.receive()
        self.cancel("disconnect")


WATCH_AFTER = 0.2  # seconds before a request gets a disconnect watcher


def parse_request(body: bytes) -> tuple[dict[str, Any], str]:
    try:
        req = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        raise RouterError(400, "the request body is not valid UTF-8 JSON, or is nested too deeply") from None
    if not isinstance(req, dict):
        raise RouterError(400, "the request body must be a JSON object")
    model = req.get("model")
    if not isinstance(model, str) or not model:
        raise RouterError(400, "you must provide a model parameter", param="model", code="missing_model")
    return req, model


def _on_demand_base(table: RoutingTable, target: ModelEntry) -> str | None:
    """The on-demand base of a LoRA adapter's entry, or None."""
    base = table.models.get(target.base) if target.base else None
    return base.name if base is not None and base.on_demand else None


def upstream_body(req: dict[str, Any], raw: bytes, model: str, inject_usage: bool,
                  budget: Budget | None = None, lora: list[dict[str, float | int]] | None = None) -> bytes:
    """The body for the engine: the client's bytes, unless the model name or usage must
    change, the engine must be held to a reserved completion `budget` (quotas.py), or
    llama.cpp's adapters must be selected (`lora`, adapters.py: [] removes the client's)."""
    if req["model"] == model and not inject_usage and budget is None and (lora is None or (not lora
                                                                                          and "lora" not in req)):
        return raw
    new = dict(req)
    new["model"] = model
    if lora is not None:
        new.pop("lora", None)
        if lora:
            new["lora"] = lora
    if budget is not None:
        for f in budget.fields:
            new[f] = budget.tokens
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


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value)
    return None


def _tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if p is None and c is None:  # the Responses API's names
        p, c = usage.get("input_tokens"), usage.get("output_tokens")
    prompt = p if isinstance(p, int) else 0
    completion = c if isinstance(c, int) else 0
    if not completion and not prompt:
        t = usage.get("total_tokens")
        prompt = t if isinstance(t, int) else 0
    return prompt, completion


class Proxy:
    def __init__(self, *, settings: RouterSettings, session: aiohttp.ClientSession,
                 table: Callable[[], RoutingTable], metrics: RouterMetrics, recorder: UsageRecorder,
                 clock: Clock, ondemand: OnDemand, quotas: Quotas, engine_keys: EngineKeys,
                 admission: Admission | None = None) -> None:
        self.settings = settings
        self.session = session
        self.table = table
        self.metrics = metrics
        self.recorder = recorder
        self.clock = clock
        self.ondemand = ondemand
        self.quotas = quotas
        self.engine_keys = engine_keys
        self.counter = PromptCounter(settings, session, engine_keys)  # exact prompts near a token limit
        self.admission = admission or Admission(settings, table, metrics=metrics)
        self.flights: set[Flight] = set()
        self.policy = EjectionPolicy(threshold=settings.eject_after_failures, max_share=settings.max_ejected_share,
                                     base=settings.backoff_base, cap=settings.backoff_max)
        self.loras = RuntimeLoras(self._post_engine, metrics.adapter_event)  # adapters loaded at run time

    async def _post_engine(self, replica: ReplicaRuntime, path: str, body: dict[str, str]) -> tuple[int, str]:
        """POST JSON to one of `replica`'s own paths (a LoRA load), with its engine key."""
        headers = self.engine_keys.authorize(replica.id, {"Content-Type": "application/json"})
        try:
            async with self.session.post(replica.endpoint + path, data=json.dumps(body).encode(), headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=self.settings.request_timeout)) as resp:
                return resp.status, (await resp.read()).decode("utf-8", "replace")
        except aiohttp.ClientError as exc:
            raise OSError(f"{type(exc).__name__}: {exc}") from None

    async def _pick_adapter(self, target: ModelEntry, tried: set[str], panic: bool) -> Choice | None:
        """A replica for an adapter its replicas load at run time (lora.py), loaded there; None: no
        such replica is left to try (the caller picks as for any model)."""
        now = time.monotonic()
        candidates = [r for r in target.replicas if r.id not in tried and r.state == "ready"
                      and (panic or not r.ejected(now)) and runtime_path(r, target.name) is not None]
        base = self.table().models.get(target.base or "")
        record = base.record if base is not None else None
        slots = self.admission.slots

        def saturated(r: ReplicaRuntime) -> bool:
            limit = replica_slots(r, self.settings, slots, record)
            return 0 < limit <= r.in_flight

        return await self.loras.acquire(target, candidates, saturated)

    def fresh_session(self) -> aiohttp.ClientSession:
        """A one-off client whose connections are new and never pooled (a retry after a stale one)."""
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout),
            auto_decompress=False, skip_auto_headers=("User-Agent",))

    async def handle(self, scope: Scope, receive: Receive, send: Send, principal: Principal, call: Call,
                     priority: Priority | None = None) -> None:
        """Serve one request; `priority` set (the Batch API's) overrides what the request asks for."""
        started = time.perf_counter()
        label = "-"
        status = 500
        flight = Flight(asyncio.current_task(), call.receive_after_upload, time.monotonic(), call)
        path, usage_capable = call.path, call.endpoint.inject_usage
        reservation: str | None = None  # quota tokens held for this request (quotas.py)
        try:
            if call.endpoint.body == "json":
                body = await read_body(scope, receive, self.settings.max_body_bytes)
                self.flights.add(flight)
                req, name = parse_request(body)
                call.parsed(req, body, name)
            else:  # a multipart form (its front: the rest streams to the engine) or a response id
                await call.read(self.settings.max_body_bytes)
                self.flights.add(flight)
                req, body, name = call.req, call.raw, call.model
            send = call.watch(send)
            table = self.table()
            entry = call.resolve(table)
            if entry is None:
                self.metrics.reject("unknown_model")
                raise RouterError(404, f"The model `{name}` does not exist or you do not have access to it.",
                                  code="model_not_found", param="model")
            label = entry.name
            # A weighted route: its targets in this key's and conversation's order (routes.py).
            table = call.restrict(table, entry) if entry.route is None else \
                self._route_view(table, entry, principal, call)
            if req.get("stream") is True and any(e.on_demand for e in table.chain(entry)):
                send = HeldStream(send)  # SSE comments while a replica starts (ondemand.py); else passes through
            budget = completion_budget(req, call.endpoint.path, self.settings)  # a 400 if not integers
            if priority is None:  # a 400 or 403 before anything is counted against a quota
                priority = requested_priority(principal.tenancy, _header(scope, PRIORITY_HEADER),
                                              req.get("service_tier"))
            chain = table.chain(entry)
            reservation = await self.quotas.admit(  # counted exactly only if the byte bound is refused
                principal, len(body), budget, lambda: self.counter.count(chain, req, call.endpoint.path))
            # A slot of the model (admission.py): waits here while its replicas are full. The
            # cost until the engine's count is known: the prompt at about 4 bytes a token.
            # An adapter shares its base's replicas, so it shares the base's slots too.
            held = (self.admission.slot(entry.base or entry.name, principal.tenancy, priority, len(body) // 4)
                    if takes_slot(call.endpoint) else contextlib.nullcontext())
            async with held as slot:
                flight.slot = slot
                # Reserved: the engine must stop at the budget, or the limit binds nothing.
                status = await self._route(table, entry, req, body, path, usage_capable, principal,
                                           send, started, flight, budget if reservation is not None else None)
        except RouterError as err:
            status = err.status
            if err.code in ADMISSION_CODES:  # the model's queue was full or the wait ran out
                self.metrics.reject("admission")
            elif err.status == 429:
                self.metrics.reject("quota")
            flight.done = True
            await send_error(send, err)
        except ClientGone:
            status = _CLIENT_CLOSED
        except _CutOff:
            status = 502  # returning without completing the response makes uvicorn drop the connection
        except asyncio.CancelledError:
            if flight.reason != "disconnect":
                raise
            flight.absorb()
            status = _CLIENT_CLOSED
        finally:
            self.quotas.release(reservation)  # after its usage was recorded: settled together
            flight.done = True
            self.flights.discard(flight)
            if flight.watcher is not None:
                flight.watcher.cancel()
            self.metrics.request_done(label, status, time.perf_counter() - started)

    async def watchdog(self, tick: float = 0.1) -> None:
        """Enforce first-byte and chunk-gap deadlines; watch long requests for disconnects."""
        while True:
            await asyncio.sleep(tick)
            self.check_flights(time.monotonic())
            self.admission.pump()  # a replica that became ready makes room for waiters

    def check_flights(self, now: float) -> None:
        for f in list(self.flights):
            if now >= f.deadline:
                f.cancel("timeout")
            elif f.watcher is None and not f.done and now - f.started >= WATCH_AFTER:
                f.watcher = asyncio.create_task(f.watch())

    def _route_view(self, table: RoutingTable, entry: ModelEntry, principal: Principal, call: Call) -> RoutingTable:
        """What a request for a weighted route may try: the target its key and conversation fall
        on, then the other targets, each with its fallbacks and restricted to the endpoint as a
        model's chain is, then the route's fallbacks."""
        route = entry.route
        assert route is not None
        pin = call.pin
        if pin is not None and pin.model in route.stats:  # a response kept by one target's replica
            return call.restrict(table, table.models[pin.model])
        refusals: list[RouterError] = []

        def chain(target: ModelEntry) -> list[ModelEntry]:
            try:
                return call.restrict(table, target).chain(target)
            except RouterError as err:  # this target serves no replica of the endpoint: the others may
                refusals.append(err)
                return []

        found = table.route_chain(entry, route.order(principal.key_id, call.endpoint.key, call.req), chain)
        if not found and refusals:
            raise refusals[0]
        return ChainView(found)

    def _route_attempt(self, flight: Flight, failed: bool | None = None, ttft: float | None = None) -> None:
        """A weighted route's per-target counts and guard (routes.py): an attempt ended (`failed`),
        or its stream's first token came (`ttft`)."""
        if flight.route is None:
            return
        route, target = flight.route
        if ttft is not None:
            trip = route.first_token(target, ttft)
            self.metrics.route_first_token(route.name, target, ttft)
        else:
            trip = route.attempted(target, bool(failed))
        if trip is not None:
            log.warning("%s", trip.reason)
            self.metrics.route_tripped(route.name, target)

    async def _route(self, table: RoutingTable, entry: ModelEntry, req: dict[str, Any], raw: bytes,
                     path: str, usage_capable: bool, principal: Principal, send: Send,
                     started: float, flight: Flight, budget: Budget | None) -> int:
        inject = wants_injection(req, usage_capable)
        tried: set[str] = set()  # replicas that failed or timed out on this request: never again
        attempts = 0
        fresh = False  # after a stale pooled connection, this request uses new connections only
        refusal: RouterError | None = None
        deadline = flight.started + self.settings.request_timeout
        bodies: dict[EngineAsk, bytes] = {}
        # Normal pass, then panic: the ejected `ready` replicas of the chain, rather than a 503.
        for panic in (False, True):
            for target in table.chain(entry):
                # What starts on demand: the model, or for a LoRA adapter its base (the adapter's
                # requests keep the base from idling; its replicas load the adapter at start).
                demand = target.name if target.on_demand else _on_demand_base(self.table(), target)
                if demand is not None and not panic:
                    self.ondemand.touch(demand)
                    if not target.routable(time.monotonic()):
                        try:
                            await self.ondemand.ensure(demand, send if isinstance(send, HeldStream) else None)
                        except RouterError as err:
                            refusal = refusal or err
                            continue
                        fresh_table = self.table()
                        target = (fresh_table.adapters if target.base else fresh_table.models).get(target.name, target)
                while attempts < self.settings.max_attempts:
                    try:
                        held = await self._pick_adapter(target, tried, panic) \
                            if target.adapter is not None and target.record.max_loras else None
                    except RouterError as err:
                        if err.code == "adapter_load_failed":  # the engine's reason, to the client now
                            raise
                        refusal = refusal or err  # no room on any replica: the fallbacks may answer
                        break
                    replica = held.replica if held is not None else \
                        target.pick(tried, time.monotonic(), panic=panic,
                                    prefix=flight.call.prefix_key() if target.by_prefix else None)
                    if replica is None:
                        break
                    attempts += 1
                    if attempts == 1:  # how long the request waited before any engine saw it
                        self.metrics.queue_wait(entry.name, time.perf_counter() - started)
                    ask = engine_ask(target, replica)  # LoRA adapters: per engine (adapters.py)
                    body = bodies.get(ask)
                    if body is None:
                        # `lora` is a field of JSON bodies; a form or a response id has none to set.
                        lora = ask.lora_json() if flight.call.endpoint.body == "json" else None
                        body = bodies[ask] = upstream_body(req, raw, ask.model, inject, budget, lora)
                    route = entry.route
                    flight.route = (route, target.name) if route is not None and target.name in route.stats \
                        else None
                    retry = _CANARY_RETRYABLE if route is not None and flight.route is not None \
                        and target.name != route.stable else _RETRYABLE_STATUS
                    try:
                        status = await self._attempt(replica, target.name, path, body, inject, principal, send,
                                                     started, flight, fresh=fresh, deadline=deadline, retry=retry,
                                                     held=held)
                        if flight.route is not None:
                            self.metrics.route_attempt(flight.route[0].name, flight.route[1], str(status))
                            self._route_attempt(flight, failed=status >= 500)
                        return status
                    except _Stale:
                        fresh = True  # the same replica may be picked again: it did nothing wrong
                    except _Reload:
                        pass  # the next pick loads the adapter again (max_attempts bounds it)
                    except _Retry:
                        tried.add(replica.id)
                        if flight.route is not None:
                            self.metrics.route_attempt(flight.route[0].name, flight.route[1], "failed")
                            self._route_attempt(flight, failed=True)
                    except _Deadline:
                        tried.add(replica.id)
                        raise RouterError(504, f"no replica of {entry.name!r} answered within "
                                               f"{self.settings.request_timeout:g} s", code="upstream_timeout",
                                          headers={"Retry-After": str(self.settings.retry_after)}) from None
        if refusal is not None and not attempts:
            raise refusal
        what = "no replica could answer" if attempts else "no replica is ready"
        raise RouterError(503, f"{what} for model {entry.name!r}; try again shortly",
                          code="no_replica_available", headers={"Retry-After": str(self.settings.retry_after)})

    async def _attempt(self, replica: ReplicaRuntime, model: str, path: str, body: bytes, strip: bool,
                       principal: Principal, send: Send, started: float, flight: Flight, *,
                       fresh: bool = False, deadline: float = _NEVER,
                       retry: frozenset[int] = _RETRYABLE_STATUS, held: Choice | None = None) -> int:
        """One attempt on `replica`; `held`: an adapter loaded there at run time, held until it ends."""
        settings = self.settings
        replica.begin()
        resp: aiohttp.ClientResponse | None = None
        session = self.fresh_session() if fresh else self.session
        try:
            flight.deadline = min(time.monotonic() + settings.first_byte_timeout, deadline)
            try:
                method, url, data, headers = flight.call.upstream(replica, body)
                headers = self.engine_keys.authorize(replica.id, headers)  # engines answer only the router
                resp = await session.request(method, url, data=data, headers=headers)
                if held is not None and resp.status == 404:
                    text = (await resp.read()).decode("utf-8", "replace")
                    if held.adapter in text:  # vLLM: "The model `NAME` does not exist."
                        self.loras.lost(held)
                        raise _Reload
                    raise RouterError(404, f"the engine serving {held.adapter!r} answered 404: {text[:300]}",
                                      code="not_found")
                if resp.status in retry:
                    await resp.read()
                    raise _Retry(f"answered {resp.status}")
                first = await resp.content.readany()
            except _Retry as exc:
                flight.deadline = _NEVER
                self._failed(replica, "status", str(exc))
                raise
            except _Reload:
                flight.deadline = _NEVER
                log.info("replica %s no longer holds adapter %s; loading it again", replica.id, held.adapter if held
                         else "?")
                raise
            except asyncio.CancelledError:
                flight.deadline = _NEVER
                if flight.reason != "timeout":
                    raise
                flight.reason = None
                flight.absorb()
                overall = time.monotonic() >= deadline
                waited = settings.request_timeout if overall else settings.first_byte_timeout
                self._failed(replica, "first_byte_timeout", f"no first byte within {waited:g} s")
                raise (_Deadline if overall else _Retry) from None
            except aiohttp.ClientConnectorError as exc:
                flight.deadline = _NEVER
                # Refused: nothing listens there, so one is enough to eject (bounded by share).
                refused = isinstance(exc.os_error, ConnectionRefusedError)
                self._failed(replica, "connect", f"{type(exc).__name__}: {exc}", decisive=refused)
                raise _Retry from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                flight.deadline = _NEVER
                flight.call.raise_upload_error()  # the client's upload broke off: not the replica's doing
                if resp is None and not fresh:
                    # Written into a pooled connection the engine had closed (or closed before
                    # answering a byte): the engine never saw the request.
                    log.info("replica %s: stale pooled connection (%s: %s); retrying on a new one",
                             replica.id, type(exc).__name__, exc)
                    self.metrics.upstream_error(replica.id, "stale_connection")
                    raise _Stale from None
                self._failed(replica, "connect", f"{type(exc).__name__}: {exc}")
                raise _Retry from None
            except (aiohttp.ClientError, OSError) as exc:
                flight.deadline = _NEVER
                flight.call.raise_upload_error()
                self._failed(replica, "connect", f"{type(exc).__name__}: {exc}")
                raise _Retry from None
            flight.deadline = _NEVER
            replica.mark_success()
            status = await self._relay(replica, model, resp, first, strip, principal, send, flight, started)
            self.metrics.replica_done(replica.id, status)
            return status
        finally:
            replica.end()
            if held is not None:
                self.loras.release(held)  # the adapter may be unloaded again once nothing holds it
            if resp is not None:
                resp.release()
            if fresh:
                await session.close()

    def _failed(self, replica: ReplicaRuntime, kind: str, why: str, *, decisive: bool = False) -> None:
        self.metrics.upstream_error(replica.id, kind)
        entry = self.table().models.get(replica.model)
        if entry is None:  # gone from the state meanwhile: nothing left to protect
            replica.mark_failure(why, base=self.policy.base, cap=self.policy.cap)
            ejected = True
        else:
            ejected = entry.failed(replica, why, self.policy, decisive=decisive)
        log.warning("replica %s failed (%d in a row%s): %s", replica.id, replica.failures,
                    ", ejected" if ejected else "", why)

    async def _relay(self, replica: ReplicaRuntime, model: str, resp: aiohttp.ClientResponse, first: bytes,
                     strip: bool, principal: Principal, send: Send, flight: Flight, started: float) -> int:
        ctype = resp.headers.get("Content-Type", "application/json")
        sse = ctype.startswith("text/event-stream")
        first_at = last_at = time.perf_counter()  # a stream's first and last event: TTFT, inter-token latency
        if sse:
            self.metrics.first_token(replica.id, first_at - started)
            if flight.route is not None:
                self._route_attempt(flight, ttft=first_at - started)
        length = resp.content_length
        headers = [(b"content-type", ctype.encode())]
        if sse:
            headers.append((b"cache-control", b"no-cache"))
            headers.append((b"x-accel-buffering", b"no"))
        elif length is not None:
            headers.append((b"content-length", str(length).encode()))
        if flight.slot is not None:
            headers += flight.slot.headers()
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        if not sse and length is not None and len(first) == length:
            # The whole body came with the first read (the usual plain completion).
            flight.done = True
            await send({"type": "http.response.body", "body": first, "more_body": False})
            if resp.status == 200:
                self._account(principal, model, flight.call.billable(usage_in_json(first)), replica.id, flight)
            return resp.status
        scanner = SseUsageScanner(strip=strip) if sse else None
        keep: list[bytes] | None = [] if not sse and resp.status == 200 else None
        kept = 0
        chunk = first
        gap = self.settings.chunk_gap_timeout
        try:
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
                flight.deadline = time.monotonic() + gap
                chunk = await resp.content.readany()
                flight.deadline = _NEVER
                if chunk:
                    last_at = time.perf_counter()
        except (aiohttp.ClientError, OSError, asyncio.CancelledError) as exc:
            flight.deadline = _NEVER
            resp.close()  # drop the engine connection: it stops generating
            if isinstance(exc, asyncio.CancelledError):
                if flight.reason != "timeout":
                    raise  # the client went away, or the router is stopping
                flight.reason = None
                flight.absorb()
                why = f"no data for {gap:g} s inside the response"
            else:
                why = f"connection lost mid-response: {type(exc).__name__}: {exc}"
            self._failed(replica, "mid_response", why)
            if not sse:
                raise _CutOff from None  # the client sees a cut-off body: nothing truthful can be added
            event = b"data: " + error_body(502, f"the engine serving {model!r} failed mid-stream: {why}",
                                           code="upstream_failed") + b"\n\n"
            flight.done = True
            await send({"type": "http.response.body", "body": event, "more_body": False})
            self._account(principal, model, flight.call.billable(scanner.usage if scanner else None), replica.id,
                          flight)
            return 502
        flight.done = True
        if scanner is not None:
            await send({"type": "http.response.body", "body": scanner.finish(), "more_body": False})
            usage = scanner.usage
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            usage = usage_in_json(b"".join(keep)) if keep and kept <= _MAX_KEEP else None
        if resp.status == 200:
            self._account(principal, model, flight.call.billable(usage), replica.id, flight)
            if sse:
                self.metrics.stream_done(replica.id, last_at - first_at, _tokens(usage)[1])
                if flight.route is not None:
                    self.metrics.route_stream_done(flight.route[0].name, flight.route[1], last_at - first_at,
                                                   _tokens(usage)[1])
        return resp.status

    def _account(self, principal: Principal, model: str, usage: dict[str, Any] | None, replica_id: str,
                 flight: Flight) -> None:
        prompt, completion = _tokens(usage)
        if flight.slot is not None and (prompt or completion):
            flight.slot.charge(prompt + completion)  # fair share counts what the engine counted
        now = time.time()
        day = self.clock.day(now)
        self.recorder.add(principal.key_id, day, model, prompt, completion)
        total = prompt + completion
        if total:
            self.metrics.tokens_used(replica_id, prompt, completion)


