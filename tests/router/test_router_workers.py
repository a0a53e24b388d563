"""A router with several workers (`llmgw router serve --workers 2`, the real CLI, over TCP).

What must hold across the worker processes: the admin API counts every worker's requests
in flight (what apply's drain polls), so a drain waits for requests another worker
holds; /metrics adds the workers' counts up; a group quota holds across workers (SQLite
and PostgreSQL stores); a killed worker is replaced and its in-flight counts cleared;
SIGTERM drains every worker; keep-alive connections opened in a burst spread over the
workers (each has a socket of its own), and an address another listener holds is refused.

The engine is a narrow double (an aiohttp server in this process): a stream that holds
until the test releases it, which the tiny llama-server cannot do on cue. Which worker
accepts a connection is the kernel's choice, so tests that need requests on both
workers open held streams until the admin API shows both holding some.

Starting a router costs three Python processes' imports (seconds of CPU each), so the tests
share one per module (`shared`), pinned to one CPU as the burst test needs, and count
in deltas; each starts from a fleet with nothing in flight, and one the last test's
SIGTERM stopped is started anew. The CLI's argument checks run in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from llmgw.store import open_store
from tests.support.cli import run_cli
from tests.support.net import free_port
from tests.support.router import HTTP, StateFile, model, replica
from tests.support.waiting import stop_process, wait_until

# The module's tests in one xdist worker (`make unit` runs --dist loadgroup), so they share one router.
pytestmark = pytest.mark.xdist_group("router_workers")

WORKERS = 2
FAST = ["--setting", "health_interval=0.3", "--setting", "state_poll_interval=0.1",
        "--setting", "key_refresh_interval=0.3", "--setting", "usage_flush_interval=0.2"]


# -- the engine double ------------------------------------------------------------------------
@dataclass
class HoldEngine:
    """Streams one chunk, then holds each stream until `release()`; plain completions at once."""

    port: int = 0
    holding: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _released: asyncio.Event | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        if not body.get("stream"):
            return web.json_response({"id": "c", "object": "chat.completion", "model": body["model"],
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": "hi"}}],
                                      "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": body["model"],
                 "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.holding += 1
        try:
            assert self._released is not None
            await self._released.wait()
        finally:
            self.holding -= 1
        end = {"id": "c", "object": "chat.completion.chunk", "model": body["model"], "choices": [],
               "usage": usage}
        await resp.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    def start(self) -> HoldEngine:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._released = asyncio.Event()
            app = web.Application()
            app.router.add_get("/health", self._health)
            app.router.add_post("/v1/chat/completions", self._chat)
            self._runner = web.AppRunner(app)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name="hold-engine")
        self._thread.start()
        assert ready.wait(10)
        return self

    def release(self) -> None:
        assert self._loop is not None and self._released is not None
        self._loop.call_soon_threadsafe(self._released.set)

    def hold_again(self) -> None:
        """Streams started from now on hold again (after every released one has ended)."""
        assert self._loop is not None and self._released is not None
        wait_until(lambda: self.holding == 0, 30, "the released streams to end")
        released, done = self._released, threading.Event()

        def clear() -> None:
            released.clear()
            done.set()

        self._loop.call_soon_threadsafe(clear)
        assert done.wait(10)

    def stop(self) -> None:
        if self._loop is not None:
            self.release()
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


# -- the router under test --------------------------------------------------------------------
@dataclass
class Workers:
    """`llmgw router serve --workers N` in a process of its own."""

    proc: subprocess.Popen[bytes]
    port: int
    admin_port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admin(self, path: str) -> Any:
        r = HTTP.get(f"http://127.0.0.1:{self.admin_port}{path}", timeout=10)
        r.raise_for_status()
        return r.json() if path != "/metrics" else r.text

    def replica(self, rid: str) -> dict[str, Any]:
        return next(r for r in self.admin("/api/v1/replicas")["replicas"] if r["id"] == rid)

    def workers(self) -> list[dict[str, Any]]:
        return list(self.admin("/api/v1/status")["workers"]["workers"])

    def all_ready(self) -> bool:
        status = self.admin("/api/v1/status")["workers"]
        return bool(status["ready"] == status["count"])


def start_workers(state_path: Path, store_url: str, log: Path, workers: int = WORKERS) -> Workers:
    """The router, serving once every worker is ready."""
    port, admin_port = free_port(), free_port()
    argv = [sys.executable, "-c", "from llmgw.cli import main; main()", "router", "serve",
            "--state", str(state_path), "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin_port}",
            "--workers", str(workers), *FAST]
    # The store as the router's unit gives it (LLMGW_STORE): a PostgreSQL URL's password is
    # refused on a command line (tests/security/test_no_secrets_in_argv_env.py).
    env = {**os.environ, "LLMGW_STORE": store_url}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    w = Workers(proc, port, admin_port, log)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the router exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return w.all_ready()
        except httpx.HTTPError:
            return False

    wait_until(up, 120, f"{workers} router workers serving")  # a bound for a hang: three interpreters start
    return w


def pin(w: Workers, cpu: int) -> None:
    """Every thread of the router's processes onto one CPU (workers, then, take turns); a
    worker the supervisor starts later inherits it. Pinned once started: three interpreters
    starting on one CPU of a busy machine took over a minute."""
    for pid in [w.proc.pid, *(x["pid"] for x in w.workers())]:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(task.name), {cpu})


def stop(w: Workers) -> None:
    stop_process(w.proc, 60)


@dataclass
class Held:
    """One streamed completion on its own connection, read to its end in a thread."""

    port: int
    key: str
    conn: http.client.HTTPConnection | None = None  # one connected already, or a new one
    status: int | None = None
    body: bytes = b""
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Held:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        conn = self.conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(
                {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
                {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            self.status = resp.status
            self.body = resp.read()
        except BaseException as exc:  # surfaced by the test's assertions
            self.error = exc
        finally:
            conn.close()
            self.done.set()

    @property
    def complete(self) -> bool:
        return self.error is None and self.status == 200 and self.body.rstrip().endswith(b"data: [DONE]")


def hold_on_every_worker(w: Workers, key: str, engine: HoldEngine, rid: str, limit: int = 40) -> list[Held]:
    """Open held streams until each worker holds at least one (the kernel picks the worker)."""
    held: list[Held] = []
    while len(held) < limit:
        for _ in range(4):
            held.append(Held(w.port, key).start())
        wait_until(lambda: engine.holding == len(held), 20, f"{len(held)} streams held by the engine")
        by_worker = w.replica(rid)["in_flight_by_worker"]
        if all(n > 0 for n in by_worker):
            return held
    raise AssertionError(f"{limit} connections all went to one worker: {w.replica(rid)}")


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if (line.startswith((name + "{", name + " "))
                and all(f'{k}="{v}"' in line for k, v in labels.items())):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture
def engine() -> Iterator[HoldEngine]:
    e = HoldEngine().start()
    yield e
    e.stop()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'store.sqlite'}"


@dataclass
class Shared:
    """One engine, state, store and router for the module's tests (see the docstring)."""

    tmp: Path
    engine: HoldEngine
    state: StateFile
    store_url: str
    key: str  # a key with no quota
    capped_key: str  # a key in a group of 5 requests a minute
    w: Workers | None = None
    starts: int = 0

    def router(self) -> Workers:
        if self.w is None or self.w.proc.poll() is not None:
            self.starts += 1
            self.w = start_workers(self.state.path, self.store_url, self.tmp / f"router-{self.starts}.log")
            pin(self.w, min(os.sched_getaffinity(0)))
        return self.w


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("workers")
    e = HoldEngine().start()
    state = StateFile(tmp / "state.json")
    state.write([model("m")], [replica("r1", "m", e.endpoint)])
    url = f"sqlite://{tmp / 'store.sqlite'}"
    store = open_store(url)
    try:
        _, key = store.create_key("tester")
        store.set_group("capped", rpm=5)
        _, capped = store.create_key("capped-key", "capped")
    finally:
        store.close()
    it = Shared(tmp, e, state, url, key, capped)
    yield it
    e.release()
    if it.w is not None:
        stop(it.w)
    e.stop()


@pytest.fixture
def router(shared: Shared) -> Iterator[tuple[Workers, str]]:
    """The shared router, serving r1 (ready) with nothing in flight and streams that hold."""
    shared.engine.hold_again()
    serial = shared.state.set_replica_state("r1", "ready").serial
    w = shared.router()
    wait_until(lambda: w.admin("/api/v1/replicas")["serial"] >= serial, 10, "the state the test starts from")
    wait_until(lambda: w.all_ready() and w.replica("r1")["in_flight"] == 0, 30, "nothing in flight")
    yield w, shared.key
    shared.engine.release()


def _usage(w: Workers) -> tuple[int, int]:
    keys = w.admin("/api/v1/usage")["keys"]  # every worker's usage flushed before the answer
    return sum(k["requests"] for k in keys), sum(k["total_tokens"] for k in keys)


# -- tests --------------------------------------------------------------------------------------
def test_drain_waits_for_every_workers_requests_and_metrics_add_up(router: tuple[Workers, str],
                                                                  shared: Shared) -> None:
    w, key = router
    engine, state = shared.engine, shared.state
    before = w.admin("/metrics")
    used_before = _usage(w)
    held = hold_on_every_worker(w, key, engine, "r1")
    rep = w.replica("r1")
    assert rep["in_flight"] == len(held) == sum(rep["in_flight_by_worker"])
    assert metric(w.admin("/metrics"), "llmgw_replica_in_flight", replica="r1") == len(held)

    # Drain: the replica leaves rotation, and the admin API still counts every worker's streams.
    serial = state.set_replica_state("r1", "draining").serial
    wait_until(lambda: w.admin("/api/v1/replicas")["serial"] >= serial, 10, "the draining state")
    r = HTTP.post(w.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                  json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503, r.text
    rep = w.replica("r1")
    assert rep["state"] == "draining" and rep["in_flight"] == len(held)
    assert all(n > 0 for n in rep["in_flight_by_worker"])

    engine.release()
    for h in held:
        assert h.done.wait(30)
    assert all(h.complete for h in held), [(h.status, h.error, h.body[-80:]) for h in held if not h.complete]
    wait_until(lambda: w.replica("r1")["in_flight"] == 0, 10, "the drain to finish")
    text = w.admin("/metrics")
    for status, n in (("200", len(held)), ("503", 1)):
        added = (metric(text, "llmgw_requests_total", model="m", status=status)
                 - metric(before, "llmgw_requests_total", model="m", status=status))
        assert added == n, (status, added)
    assert metric(text, "llmgw_replica_in_flight", replica="r1") == 0
    requests, tokens = _usage(w)
    assert requests - used_before[0] == len(held) + 0  # the 503 used no tokens: not counted
    assert tokens - used_before[1] == 5 * len(held)


def test_killed_worker_is_replaced_and_its_counts_cleared(router: tuple[Workers, str], shared: Shared) -> None:
    w, key = router
    engine = shared.engine
    held = hold_on_every_worker(w, key, engine, "r1")
    by_worker = w.replica("r1")["in_flight_by_worker"]
    before = w.workers()
    victim = before[0]
    os.kill(victim["pid"], signal.SIGKILL)

    def replaced() -> bool:
        now = w.workers()[0]
        return bool(now["pid"] != victim["pid"] and now["ready"] and now["restarts"] == victim["restarts"] + 1)

    wait_until(replaced, 30, "worker 0 replaced")
    # The streams worker 0 held died with it, and no longer count; worker 1's still do.
    assert w.replica("r1")["in_flight_by_worker"] == [0, by_worker[1]]
    assert w.replica("r1")["in_flight"] == by_worker[1]
    engine.release()
    for h in held:
        assert h.done.wait(30)
    survivors = [h for h in held if h.complete]
    assert len(survivors) == by_worker[1]
    wait_until(lambda: w.replica("r1")["in_flight"] == 0, 10, "no request in flight")
    # Both workers serve again: each connection a new one, until each has taken some.
    for _ in range(40):
        r = httpx.post(w.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert r.status_code == 200, r.text
    assert w.proc.poll() is None


def test_a_burst_of_connections_spreads_over_the_workers(router: tuple[Workers, str], shared: Shared) -> None:
    # A load balancer's pool, or a benchmark, opens its keep-alive connections at once;
    # they stay where they land. On one shared socket the first worker to run took them
    # all (seen: 32 of 32 on a busy host; here both workers share one CPU, so one runs
    # first); a socket per worker lets the kernel spread them (all 16 on one of 2
    # workers by chance: 2 in 65,536).
    w, key = router
    engine = shared.engine
    socks = [socket.socket() for _ in range(16)]
    for sock in socks:  # every handshake started before any completes, as a pool does
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", w.port))
    _, writable, _ = select.select([], socks, [], 10)
    assert len(writable) == len(socks)
    conns = []
    for sock in socks:
        sock.settimeout(60)
        conn = http.client.HTTPConnection("127.0.0.1", w.port, timeout=60)
        conn.sock = sock
        conns.append(conn)
    held = [Held(w.port, key, conn=c).start() for c in conns]
    wait_until(lambda: engine.holding == len(held), 20, f"{len(held)} streams held by the engine")
    by_worker = w.replica("r1")["in_flight_by_worker"]
    assert sum(by_worker) == len(held) and all(n > 0 for n in by_worker), by_worker
    engine.release()
    for h in held:
        assert h.done.wait(30)
    assert all(h.complete for h in held)


def test_an_address_another_listener_holds_is_refused(tmp_path: Path, state: StateFile, store_url: str) -> None:
    # Workers bind with SO_REUSEPORT, which would let them join another listener of the
    # same user that has it too (a router left running) and take half its connections.
    state.write([model("m")], [])
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        r = subprocess.run([sys.executable, "-c", "from llmgw.cli import main; main()", "router", "serve",
                            "--state", str(state.path), "--store", store_url, "--workers", "2",
                            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{free_port()}"],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"Error: cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"


def _fire(w: Workers, key: str, n: int) -> list[int]:
    """n requests at once, each on its own connection (so both workers take some)."""
    codes: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        r = httpx.post(w.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        with lock:
            codes.append(r.status_code)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return codes


def _quota_holds(w: Workers, key: str) -> None:
    """`key`'s group allows 5 requests a minute and has not been used yet."""
    # Not across a minute boundary: the limit is per clock minute (weighted by the last).
    wait_until(lambda: time.time() % 60 < 50, 15, "a minute with 10 s left")
    before = w.admin("/metrics")
    codes = _fire(w, key, 20)
    assert sorted(codes) == [200] * 5 + [429] * 15, codes
    text = w.admin("/metrics")
    for status, n in (("200", 5), ("429", 15)):
        added = (metric(text, "llmgw_requests_total", model="m", status=status)
                 - metric(before, "llmgw_requests_total", model="m", status=status))
        assert added == n, (status, added)


def test_quota_holds_across_workers_sqlite(router: tuple[Workers, str], shared: Shared) -> None:
    w, _ = router
    _quota_holds(w, shared.capped_key)


@pytest.mark.postgres
def test_quota_holds_across_workers_postgres(tmp_path: Path, state: StateFile, engine: HoldEngine,
                                             pg_url: str) -> None:
    state.write([model("m")], [replica("r1", "m", engine.endpoint)])
    store = open_store(pg_url)
    try:
        store.set_group("capped", rpm=5)
        _, key = store.create_key("capped-key", "capped")
    finally:
        store.close()
    w = start_workers(state.path, pg_url, tmp_path / "router.log")
    try:
        _quota_holds(w, key)
    finally:
        stop(w)


def test_workers_option_is_checked(tmp_path: Path, state: StateFile, store_url: str) -> None:
    # In-process: the check comes before anything listens (the test above runs the real CLI).
    state.write([model("m")], [])
    for bad, says in (("0", "out of range"), ("many", "not a number")):
        r = run_cli("router", "serve", "--state", str(state.path), "--store", store_url, "--workers", bad)
        assert r.exit_code == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


# Last of the tests on the shared router: it stops it (one a later test needs is started anew).
def test_sigterm_drains_every_worker(router: tuple[Workers, str], shared: Shared) -> None:
    w, key = router
    engine = shared.engine
    held = hold_on_every_worker(w, key, engine, "r1")
    pids = [x["pid"] for x in w.workers()]
    w.proc.send_signal(signal.SIGTERM)

    def refusing() -> bool:
        c = http.client.HTTPConnection("127.0.0.1", w.port, timeout=2)
        try:
            c.request("GET", "/health")
            c.getresponse().read()
        except OSError:
            return True
        finally:
            c.close()
        return False

    wait_until(refusing, 20, "the client listener to close")
    assert all(not h.done.is_set() for h in held), "a held stream ended before its drain"
    assert w.proc.poll() is None  # still draining: waiting for the workers
    engine.release()
    for h in held:
        assert h.done.wait(30)
    assert all(h.complete for h in held), [(h.status, h.error, h.body[-80:]) for h in held if not h.complete]
    assert w.proc.wait(30) == 0
    for pid in pids:
        wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists() or "zombie" in _proc_state(pid), 10,
                   f"worker {pid} gone")

