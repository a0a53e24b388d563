"""Demand, the router's side: ask the controller for replicas, report load to it.

The router never starts or stops a replica and never writes the state: the controller
does (llmgw.controller, docs/demand.md). The router takes a `DemandClient` from outside
(activator.py's ControllerClient speaks the controller's demand API; tests hand in their
own); without one, a request for a model with no replica running is answered 503 saying so.

- A request for a model with no routable replica asks the controller to start one (one
  ask per model at a time, however many requests wait: the controller makes one
  activation of many asks) and is held until the router's state shows a routable replica,
  for at most the model's `activation_timeout` (the controller's answer says it), then
  routed, or answered 503 with Retry-After and the controller's reason. A streaming
  request gets its response started and SSE comments (`: ...`) while it waits, so clients
  and proxies in front do not time out; a failure then arrives as an SSE error event.
- Every `report_interval` seconds the router reports its load: per replica, requests in
  flight, seconds since its last request and whether its health checks find it failing
  (the controller refreshes the facts of nodes whose replicas fail: controller/refresh.py);
  per model, requests held, seconds since the last request, how long the longest waiter in
  admission's queue has waited, and the backlog of the batches this router runs (requests
  not sent yet: the router sends a batch a few requests at a time, so its queue never
  shows them). The controller decides idle stops and scaling from every router's reports
  together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from llmgw.router.asgi import Message, Send
from llmgw.router.openai_errors import RouterError
from llmgw.router.settings import RouterSettings
from llmgw.router.table import RoutingTable

log = logging.getLogger("llmgw.router")

ASK_EVERY = 1.0  # seconds between asks while a request is held (a failure is learnt this soon)


@dataclass(frozen=True)
class Answer:
    """The controller's answer to an ask: pending | starting | ready | failed."""

    status: str
    reason: str = ""
    hold_s: float | None = None


class DemandClient(Protocol):
    name: str  # this router as the inventory names it

    async def ask(self, model: str) -> Answer:
        """Ask for a replica of `model` to be started (idempotent)."""

    async def report(self, report: dict[str, Any]) -> None:
        """Hand the controller this router process's load."""


Activator = DemandClient  # what `--activator MODULE:FACTORY` makes (router/plugins.py)


class HeldStream:
    """A streaming response started while its request is held: SSE comments until routed.

    Whatever is sent afterwards goes through it: a 200 streams on as is; an error response
    (a status above 299) becomes one SSE `data:` event carrying its JSON body."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        self.status: int | None = None
        self.body = b""

    async def start(self, comment: str) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": 200,
                         "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
                                     (b"x-accel-buffering", b"no")]})
        await self.comment(comment)

    async def comment(self, text: str) -> None:
        await self.send({"type": "http.response.body", "body": f": {text}\n\n".encode(), "more_body": True})

    async def __call__(self, message: Message) -> None:
        if not self.started:
            await self.send(message)
            return
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            return
        if message["type"] != "http.response.body" or self.status is None or self.status < 300:
            await self.send(message)
            return
        self.body += message.get("body", b"")
        if not message.get("more_body", False):
            await self.send({"type": "http.response.body", "body": b"data: " + self.body.strip() + b"\n\n",
                             "more_body": False})


class OnDemand:
    def __init__(self, client: DemandClient | None, settings: RouterSettings,
                 table: Callable[[], RoutingTable], changed: Callable[[], asyncio.Event],
                 poke_state: Callable[[], None], *, report_interval: float = 2.0,
                 keepalive_interval: float = 5.0) -> None:
        self.activator = client
        self.settings = settings
        self.table = table
        self.changed = changed
        self.poke_state = poke_state
        self.report_interval = report_interval
        self.keepalive_interval = keepalive_interval
        self.asking: dict[str, asyncio.Task[Answer]] = {}  # model -> the ask in flight
        self.answers: dict[str, Answer] = {}  # model -> the controller's last answer
        self.waiting: dict[str, int] = {}  # model -> requests held now
        # model -> requests waiting in admission's queue (app.py sets it): load as well.
        self.queued: Callable[[], dict[str, int]] = dict
        # model -> seconds its longest waiter in admission's queue has waited; model name (as
        # batch lines name it: an alias too) -> batch requests not sent yet (app.py sets both).
        self.queue_wait: Callable[[], dict[str, float]] = dict
        self.backlog: Callable[[], dict[str, int]] = dict
        self.last_request: dict[str, float] = {}  # model -> monotonic time of the last request
        self.report_error: str | None = None

    @property
    def activating(self) -> set[str]:
        """Models this router holds requests for (the admin API shows them)."""
        return {m for m, n in self.waiting.items() if n > 0}

    def touch(self, model: str) -> None:
        self.last_request[model] = time.monotonic()

    def _unavailable(self, message: str) -> RouterError:
        return RouterError(503, message, code="model_not_running",
                           headers={"Retry-After": str(self.settings.retry_after)})

    async def _ask(self, model: str) -> Answer:
        """One ask at a time per model, shared by every request held for it."""
        task = self.asking.get(model)
        if task is None or task.done():
            assert self.activator is not None
            task = asyncio.create_task(self.activator.ask(model), name=f"ask for {model}")
            self.asking[model] = task
        try:
            answer = await asyncio.shield(task)
        except Exception as exc:  # the controller unreachable: say so, keep holding until the bound
            answer = Answer("pending", f"the controller did not answer: {exc}")
        self.answers[model] = answer
        return answer

    async def ensure(self, model: str, held: HeldStream | None = None) -> None:
        """Hold until `model` has a routable replica, asking the controller to start one.

        `held`: the request streams; its response is started (SSE comments) while it waits."""
        if self.activator is None:
            raise self._unavailable(
                f"model {model!r} is started on demand and has no replica running, and this router "
                "has no controller to ask for one: scale it up (min >= 1) and apply, or give the router "
                "the controller's demand API (llmgw_router_controller_url)")
        self.touch(model)
        self.waiting[model] = self.waiting.get(model, 0) + 1
        try:
            await self._hold(model, held)
        finally:
            self.waiting[model] -= 1

    async def _hold(self, model: str, held: HeldStream | None) -> None:
        started = time.monotonic()
        bound = float(self.settings.activation_timeout)
        next_ask = started
        # A quick refusal (nothing can place it) is a 503 before any stream starts.
        next_comment = started + min(2.0, self.keepalive_interval)
        while True:
            now = time.monotonic()
            entry = self.table().models.get(model)
            if entry is not None and entry.routable(now):
                return
            if now >= next_ask:
                answer = await self._ask(model)
                next_ask = time.monotonic() + ASK_EVERY
                if answer.hold_s is not None:
                    bound = answer.hold_s
                if answer.status == "failed":
                    raise self._unavailable(f"could not start model {model!r}: {answer.reason}")
                if answer.status == "ready":
                    self.poke_state()  # the controller's apply delivered it: look at once
            now = time.monotonic()
            if now - started >= bound:
                why = self.answers.get(model)
                raise self._unavailable(f"model {model!r} did not become ready within {bound:g} s of being "
                                        "asked for" + (f" ({why.status}: {why.reason})" if why and why.reason else ""))
            if held is not None and now >= next_comment:
                text = f"waiting for a replica of {model} to start ({now - started:.0f} s)"
                await (held.comment(text) if held.started else held.start(text))
                next_comment = now + self.keepalive_interval
            event = self.changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), max(0.05, min(0.5, next_ask - now, started + bound - now)))

    # -- reports ----------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """This process's load, as the controller's demand API takes it (controller/demand.py)."""
        now = time.monotonic()
        table = self.table()
        assert self.activator is not None
        queued = self.queued()
        return {"router": self.activator.name, "process": str(os.getpid()), "serial": table.serial,
                "replicas": {r.id: {"in_flight": max(0, r.in_flight), "idle_s": round(max(0.0, now - r.last_active), 3),
                                    "healthy": r.health != "unhealthy"}
                             for r in table.replicas.values()},
                "waiting": {m: n for m in {*self.waiting, *queued}
                            if (n := self.waiting.get(m, 0) + queued.get(m, 0)) > 0},
                "model_idle_s": {m: round(max(0.0, now - t), 3) for m, t in self.last_request.items()},
                "queue_wait_s": {m: round(w, 3) for m, w in self.queue_wait().items()},
                "backlog": self._backlog(table)}

    def _backlog(self, table: RoutingTable) -> dict[str, int]:
        """Batch requests not sent yet, per model of the table (aliases resolved; names the
        table does not know are not reported: the controller would count them for nothing)."""
        out: dict[str, int] = {}
        for name, n in self.backlog().items():
            entry = table.resolve(name)
            if entry is not None and n > 0:
                out[entry.name] = out.get(entry.name, 0) + n
        return out

    async def run_reports(self) -> None:
        if self.activator is None:
            return
        while True:
            try:
                await self.activator.report(self.report())
                if self.report_error is not None:
                    log.info("reporting load to the controller again")
                self.report_error = None
            except Exception as exc:
                if self.report_error is None:
                    log.warning("cannot report load to the controller (%s); it counts this router as not known "
                                "(no idle stops or scale downs) until it can", exc)
                self.report_error = str(exc)
            await asyncio.sleep(self.report_interval)

    async def close(self) -> None:
        tasks = list(self.asking.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

