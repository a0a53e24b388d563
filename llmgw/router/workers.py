"""A router on every core: a supervisor and N worker processes sharing the client address.

    llmgw router serve --workers N      (default: the CPUs this process may run on)

The supervisor (the process systemd starts) binds the client address once per worker
(SO_REUSEPORT, server.py `bind_group`), creates the shared counters (shared.py) and
starts N workers, `python -m llmgw.router.worker`, handing each its listening socket,
the counters and a control socket by file descriptor, and its settings on stdin (the
store URL too: never on a command line). The kernel spreads new connections over the
workers' sockets (one shared socket would not: the first worker awake takes every
waiting connection, and keep-alive connections stay where they landed). Each worker
runs the whole client path — auth, quotas, routing, relay, usage — on its own event
loop, counting its requests in flight in its own row of the shared counters.

The supervisor serves the admin and metrics listeners for the router as a whole, from a
`Router` of its own that routes nothing:

- in flight, requests and last use per replica are sums over the workers' rows, so
  /api/v1/replicas (what apply's drain polls) counts every worker's requests, and the
  least-load pick of each worker sees the others' load as well;
- /metrics asks every worker for its counts over its control socket and merges them
  with metrics.py's `snapshot()`/`absorb()` (the contract lives there: every counter and
  histogram is a dict metrics.py can snapshot, so nothing here is metric-specific); the
  gauges are rendered once, from the supervisor's table, which reads the shared counts.
  A worker that does not answer in time counts with its last answer; a replaced
  worker's last answer is kept, so merged counters never go back (what it counted after
  its last scrape is lost with it);
- /api/v1/usage first has every worker write its usage to the store;
- idle stops of on-demand replicas run here only, once for the router (the shared last
  use says when any worker last used a replica). Activations start in the worker that
  holds the request, as in one process.

Health: every worker checks every replica and ejects on its own evidence, as one
process does; the supervisor checks too, for the admin API. Ejections are not shared,
on purpose: a failure one worker sees is retried on another replica before the first
byte, so a worker that has not learnt yet costs one extra attempt, never a failed
request; checks are one GET per replica per `health_interval` per worker; and sharing
the ejection state (failures in a row, backoff, a model's share of ejected replicas)
would put cross-process writes and their races on the failure path.

Quotas and usage are the store's: it admits a limited group's request in one
transaction serialised per group (SQLite BEGIN IMMEDIATE, PostgreSQL advisory locks),
across processes as across routers.

Stopping: SIGTERM (or SIGINT) to the supervisor forwards SIGTERM to every worker; each
stops accepting, gives its requests `graceful_timeout` seconds and writes its last
usage. The supervisor closes its copies of the sockets at once (new connections are
refused, not queued), waits for the workers (killing any still there after
graceful_timeout + 10 s) and stops its own listeners last, so a drain can be watched to
its end. A worker that exits otherwise is restarted — at once, or after a backoff
(1 s doubling to 30 s) while it keeps dying within 10 s of its start — with its row of
in-flight counts zeroed first. Its socket stays open for a restart at once (the
connections the kernel queued there wait for the replacement); for a backoff it is
closed (new connections go to the other workers) and bound anew for the replacement.
Workers die with the supervisor (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw.router.metrics import RouterMetrics
from llmgw.router.ondemand import Activator
from llmgw.router.server import RouterServer, bind, bind_group
from llmgw.router.settings import RouterSettings
from llmgw.router.shared import SharedTable
from llmgw.router.worker import REPLY
from llmgw.store import Store

log = logging.getLogger("llmgw.router")

ASK_TIMEOUT = 5.0  # seconds a worker has to answer the supervisor
READY_TIMEOUT = 120.0
QUICK_DEATH = 10.0  # a worker dying sooner than this after its start is restarted with a backoff
BACKOFF_MAX = 30.0


# -- the supervisor -----------------------------------------------------------------------
@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False
    started: float = 0.0
    restarts: int = 0
    backoff: float = 0.0
    restart_at: float = 0.0
    snapshot: dict[str, Any] | None = None  # its last metrics answer
    seq: int = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Supervisor:
    """Runs `workers` worker processes and the admin side of the router (app.py `Peers`)."""

    workers: int
    state_path: Path
    store: Store
    store_url: str
    listen: tuple[str, int]
    admin_listen: tuple[str, int]
    metrics_listen: tuple[str, int] | None = None
    settings: RouterSettings = field(default_factory=RouterSettings)
    activator: Activator | None = None
    activator_spec: str | None = None  # each worker loads its own from these words
    site_dir: Path | None = None
    log_level: str = "info"
    graceful_timeout: int = 30
    addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    server: RouterServer | None = None
    _pool: list[_Worker] = field(default_factory=list)
    _shared: SharedTable | None = None
    _clients: list[socket.socket | None] = field(default_factory=list)  # worker i listens on [i]
    _stop: asyncio.Event | None = None
    _stopping: bool = False
    _retired: RouterMetrics | None = None  # the last counts of replaced workers
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self, *, install_signals: bool = True) -> None:
        self._stop = asyncio.Event()
        self._clients = list(bind_group(*self.listen, self.workers))
        first = self._clients[0]
        assert first is not None
        self.addresses["client"] = first.getsockname()[:2]
        self._shared = SharedTable.create(rows=self.workers)
        self.server = server = RouterServer(
            state_path=self.state_path, store=self.store, listen=None, admin_listen=self.admin_listen,
            metrics_listen=self.metrics_listen, settings=self.settings, activator=self.activator,
            graceful_timeout=self.graceful_timeout, site_dir=self.site_dir, shared=self._shared, peers=self)
        serving = asyncio.create_task(server.run())
        try:
            while not server.started.is_set():
                await asyncio.sleep(0.01)
            if serving.done():
                await serving  # it failed to start: its error is the answer
                return
            self.addresses.update(server.addresses)
            assert server.router is not None
            self._retired = RouterMetrics(server.router.metrics.table)
            if install_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self.stop)
            self._pool = [_Worker(i) for i in range(self.workers)]
            for w in self._pool:
                await self._spawn(w)
            log.info("client listener on http://%s:%d, %d workers", *self.addresses["client"], self.workers)
            while not self._stop.is_set():
                self._watch()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 0.2)
        finally:
            await self._shutdown()
            server.stop()
            with contextlib.suppress(Exception):
                await serving
            self._shared.close()

    def stop(self) -> None:
        """Drain every worker, then stop (safe from a signal handler in the loop)."""
        if self._stop is not None:
            self._stop.set()

    # -- workers -------------------------------------------------------------------------
    async def _spawn(self, w: _Worker) -> None:
        assert self._shared is not None
        client = self._clients[w.index]
        if client is None:  # closed for its backoff: the address again, in the group
            client = self._clients[w.index] = bind(*self.addresses["client"], reuse_port=True)
        ours, theirs = socket.socketpair()
        spec = {"index": w.index, "parent": os.getpid(), "state_path": str(self.state_path),
                "store_url": self.store_url, "settings": dataclasses.asdict(self.settings),
                "activator": self.activator_spec, "site_dir": str(self.site_dir) if self.site_dir else None,
                "log_level": self.log_level, "graceful_timeout": self.graceful_timeout,
                "client_fd": client.fileno(), "shared_fd": self._shared.fd, "control_fd": theirs.fileno()}
        try:
            w.proc = subprocess.Popen([sys.executable, "-m", "llmgw.router.worker"], stdin=subprocess.PIPE,
                                      pass_fds=(client.fileno(), self._shared.fd, theirs.fileno()))
            assert w.proc.stdin is not None
            w.proc.stdin.write(json.dumps(spec).encode())  # far below a pipe's buffer: never blocks
            w.proc.stdin.close()
        finally:
            theirs.close()
        if self._stopping:  # started while the router began to stop: it drains with the rest
            w.proc.send_signal(signal.SIGTERM)
        w.started = time.monotonic()
        w.ready = False
        w.reader, w.writer = await asyncio.open_connection(sock=ours)
        self._task(self._await_ready(w, w.proc), f"llmgw-worker-{w.index}-ready")

    async def _await_ready(self, w: _Worker, proc: subprocess.Popen[bytes]) -> None:
        # A worker answers only once it listens: its first answer says it is ready.
        answer = await self._ask(w, b"p", READY_TIMEOUT)
        if answer is not None and w.proc is proc:
            w.ready = True
            log.info("worker %d (pid %d) is serving", w.index, proc.pid)

    def _watch(self) -> None:
        """Restart the workers that exited (their in-flight counts zeroed first)."""
        assert self._shared is not None
        now = time.monotonic()
        for w in self._pool:
            if w.proc is None:
                if now >= w.restart_at:
                    w.restart_at = float("inf")  # one start at a time
                    self._task(self._respawn(w), f"llmgw-worker-{w.index}-start")
                continue
            code = w.proc.poll()
            if code is None:
                continue
            lived = now - w.started
            w.backoff = 0.0 if lived >= QUICK_DEATH else min(BACKOFF_MAX, max(1.0, w.backoff * 2))
            log.warning("worker %d (pid %d) exited with %s after %.1f s; restarting it%s", w.index, w.proc.pid,
                        code, lived, f" in {w.backoff:g} s" if w.backoff else "")
            self._close_control(w)
            if w.snapshot is not None and self._retired is not None:
                self._retired.absorb(w.snapshot)
                w.snapshot = None
            self._shared.clear_row(w.index)
            client = self._clients[w.index]
            if w.backoff and client is not None:  # no new connections for it while it waits
                client.close()
                self._clients[w.index] = None
            w.proc = None
            w.ready = False
            w.restarts += 1
            w.restart_at = now + w.backoff

    def _task(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)  # held until done (the loop keeps only weak references)
        task.add_done_callback(self._tasks.discard)

    async def _respawn(self, w: _Worker) -> None:
        try:
            await self._spawn(w)
        except Exception as exc:  # e.g. out of processes: try again after the backoff
            w.backoff = min(BACKOFF_MAX, max(1.0, w.backoff * 2))
            log.error("cannot start worker %d (retrying in %g s): %s", w.index, w.backoff, exc)
            w.restart_at = time.monotonic() + w.backoff

    def _close_control(self, w: _Worker) -> None:
        if w.writer is not None:
            w.writer.close()
        w.reader = w.writer = None

    async def _shutdown(self) -> None:
        self._stopping = True
        for w in self._pool:
            if w.alive:
                assert w.proc is not None
                w.proc.send_signal(signal.SIGTERM)
        for client in self._clients:
            if client is not None:
                client.close()  # with the workers' copies closing, new connections are refused
        deadline = time.monotonic() + self.graceful_timeout + 10
        while any(w.alive for w in self._pool) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for w in self._pool:
            if w.proc is not None:
                if w.alive:
                    log.warning("worker %d (pid %d) did not stop in time: killing it", w.index, w.proc.pid)
                    w.proc.kill()
                w.proc.wait()
            self._close_control(w)

    # -- asking the workers ----------------------------------------------------------------
    async def _ask(self, w: _Worker, command: bytes, timeout: float = ASK_TIMEOUT) -> Any:
        """Send one command; its answer (JSON), or None when the worker did not give one
        (or is still starting: only the readiness ping waits for that)."""
        if not w.ready and command != b"p":
            return None
        async with w.lock:
            if w.reader is None or w.writer is None:
                return None
            w.seq = (w.seq + 1) & 0xFFFFFFFF
            try:
                w.writer.write(command + struct.pack(">I", w.seq))
                await w.writer.drain()
                async with asyncio.timeout(timeout):
                    while True:  # an answer to an earlier command that timed out is skipped
                        seq, size = REPLY.unpack(await w.reader.readexactly(REPLY.size))
                        body = await w.reader.readexactly(size)
                        if seq == w.seq:
                            return json.loads(body)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                if not self._stopping:
                    log.warning("worker %d did not answer %r: %s", w.index, command.decode(),
                                type(exc).__name__)
                return None

    async def render_metrics(self, own: RouterMetrics) -> bytes:
        return (await self.merged_metrics(own)).render()

    async def merged_metrics(self, own: RouterMetrics) -> RouterMetrics:
        answers = await asyncio.gather(*(self._ask(w, b"m") for w in self._pool))
        merged = RouterMetrics(own.table)
        merged.absorb(own.snapshot())
        if self._retired is not None:
            merged.absorb(self._retired.snapshot())
        for w, answer in zip(self._pool, answers, strict=True):
            if isinstance(answer, dict):
                w.snapshot = answer
            if w.snapshot is not None:
                merged.absorb(w.snapshot)
        return merged

    async def flush_usage(self) -> None:
        await asyncio.gather(*(self._ask(w, b"u") for w in self._pool))

    def status(self) -> dict[str, Any]:
        return {"count": self.workers, "ready": sum(1 for w in self._pool if w.ready),
                "workers": [{"index": w.index, "pid": w.proc.pid if w.proc is not None else None,
                             "ready": w.ready, "restarts": w.restarts} for w in self._pool]}
