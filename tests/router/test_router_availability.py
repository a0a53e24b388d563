"""Availability under load: stale keep-alive connections, bounded ejection, panic mode,
one deadline per request, health checks that tell busy from down.

A narrow HTTP server stands in for an engine where the behaviour must be exact (it
closes or resets a keep-alive connection the moment a second request arrives on it,
the race a real engine loses now and then); the real llama-server where load matters.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx
import pytest

from llmgw.router import RouterSettings
from llmgw.router.health import HealthChecker, classify
from llmgw.router.table import EjectionPolicy, RoutingTable
from llmgw.state import State
from tests.support.net import free_port
from tests.support.router import FAST, HTTP, Engine, RunningRouter, StateFile, model, replica, wait_until

QUIET = RouterSettings(**{**FAST.__dict__, "health_interval": 3600.0})  # no active checks
MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]

Mode = Literal["ok", "close_second", "reset_second", "hang", "fail_first", "no_slot", "loading"]


def _completion(stream: bool) -> tuple[bytes, bytes]:
    if stream:
        events = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("hel", "lo")]
        events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        return b"text/event-stream", body
    return b"application/json", json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()


class NarrowEngine:
    """Just enough of an OpenAI engine over HTTP/1.1 keep-alive, with one misbehaviour.

    close_second / reset_second: each connection answers its first request, then closes
    (FIN) or resets (RST) when the next request arrives on it, without a byte of answer.
    hang: accepts and never answers. fail_first: answers 502 to the first `fails` POSTs.
    no_slot / loading: /health answers 503 as llama.cpp does when saturated / loading.
    """

    def __init__(self, mode: Mode, fails: int = 0) -> None:
        self.mode = mode
        self.fails = fails
        self.posts = 0
        self.answered = 0
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.stop = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.conns.append(conn)
            if self.mode != "hang":
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket, buf: bytes) -> tuple[bytes, bytes, bytes] | None:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return head, rest[:length], rest[length:]

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        served = 0
        try:
            while True:
                got = self._read_request(conn, buf)
                if got is None:
                    return
                head, body, buf = got
                if served and self.mode in ("close_second", "reset_second"):
                    if self.mode == "reset_second":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.close()
                    return
                served += 1
                conn.sendall(self._answer(head, body))
        except OSError:
            return

    def _answer(self, head: bytes, body: bytes) -> bytes:
        if head.startswith(b"GET /health"):
            status, ctype, payload = 200, b"application/json", b'{"status":"ok"}'
            if self.mode == "no_slot":
                status, payload = 503, b'{"status":"no slot available"}'
            elif self.mode == "loading":
                status, payload = 503, b'{"error":{"code":503,"message":"Loading model"}}'
        else:
            with self.lock:
                self.posts += 1
                failing = self.mode == "fail_first" and self.posts <= self.fails
                if not failing:
                    self.answered += 1
            if failing:
                status, ctype, payload = 502, b"application/json", b'{"error":"warming up"}'
            else:
                status = 200
                ctype, payload = _completion(json.loads(body).get("stream") is True)
        reason = {200: b"OK", 502: b"Bad Gateway", 503: b"Service Unavailable"}[status]
        return (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                % (status, reason, ctype, len(payload))) + payload

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        with self.lock:
            for c in self.conns:
                c.close()
        self.sock.close()


@pytest.fixture
def narrow() -> Iterator[Callable[..., NarrowEngine]]:
    made: list[NarrowEngine] = []

    def make(mode: Mode, fails: int = 0) -> NarrowEngine:
        e = NarrowEngine(mode, fails)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def chat(router: RunningRouter, key: str, name: str = "m", *, stream: bool = False,
         timeout: float = 30) -> httpx.Response:
    return HTTP.post(router.base_url + "/v1/chat/completions", timeout=timeout,
                     headers={"Authorization": f"Bearer {key}"},
                     json={"model": name, "messages": MESSAGES, "max_tokens": 2, "stream": stream})


# -- stale pooled connections -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["close_second", "reset_second"])
@pytest.mark.parametrize("stream", [False, True])
def test_stale_keepalive_connection_is_retried_fresh_and_not_held_against_the_replica(
        narrow: Callable[..., NarrowEngine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str, mode: Mode, stream: bool) -> None:
    eng = narrow(mode)
    state.write([model("m")], [replica("only", "m", eng.endpoint)])
    router = start_router(state.path, settings=QUIET)
    for i in range(6):  # every other request lands on a connection the engine closes under it
        r = chat(router, api_key, stream=stream)
        assert r.status_code == 200, (i, r.text)
        assert "hel" in r.text
    assert eng.answered == 6 and eng.connections == 6  # one pooled, one fresh, one pooled...
    only = router.replica("only")
    assert only["consecutive_failures"] == 0 and only["routable"] and only["health"] != "unhealthy"
    text = HTTP.get(router.admin_url + "/metrics").text
    assert 'llmgw_upstream_errors_total{kind="stale_connection",model="m",replica="only"} 3.0' in text


# -- one deadline per request --------------------------------------------------------------------

def test_one_deadline_for_every_attempt_and_no_second_try_on_a_replica_that_timed_out(
        narrow: Callable[..., NarrowEngine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    hung = [narrow("hang") for _ in range(3)]
    state.write([model("m")], [replica(f"h{i}", "m", h.endpoint) for i, h in enumerate(hung)])
    settings = RouterSettings(**{**QUIET.__dict__, "first_byte_timeout": 1.0, "request_timeout": 1.5,
                                 "max_attempts": 6})
    router = start_router(state.path, settings=settings)
    r = chat(router, api_key)
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "upstream_timeout" and "within 1.5 s" in r.json()["error"]["message"]
    # 1 s on the first, the half second left on the second; the third never tried, none twice.
    assert sorted(h.connections for h in hung) == [0, 1, 1]


# -- ejection: threshold, share, panic ------------------------------------------------------------

def _table(n: int) -> RoutingTable:
    reps = [replica(f"r{i}", "m", f"http://127.0.0.1:{9000 + i}") for i in range(n)]
    return RoutingTable(State(models=[model("m", min=n)], replicas=reps))


def test_consecutive_failures_eject_and_a_success_resets_the_count() -> None:
    t = _table(2)
    entry, r0 = t.models["m"], t.replicas["r0"]
    policy = EjectionPolicy(threshold=3, max_share=0.5, base=10, cap=10)
    assert not entry.failed(r0, "502", policy, now=0.0)
    assert not entry.failed(r0, "502", policy, now=0.0)
    r0.mark_success()
    assert not entry.failed(r0, "502", policy, now=0.0)  # the count started again
    assert not entry.failed(r0, "502", policy, now=0.0)
    assert r0.routable(0.0)
    assert entry.failed(r0, "502", policy, now=0.0)
    assert not r0.routable(1.0) and r0.routable(10.0)
    assert entry.pick(set(), 1.0).id == "r1"  # type: ignore[union-attr]


def test_at_most_the_share_is_ejected_and_panic_tries_the_ejected() -> None:
    t = _table(4)
    entry = t.models["m"]
    policy = EjectionPolicy(threshold=1, max_share=0.5, base=10, cap=10)
    ejected = [entry.failed(t.replicas[f"r{i}"], "refused", policy, decisive=True, now=0.0) for i in range(4)]
    assert ejected == [True, True, False, False]
    assert {r.id for r in entry.routable(1.0)} == {"r2", "r3"}
    # A lone replica may always be ejected; then only panic mode picks it.
    t1 = _table(1)
    e1, only = t1.models["m"], t1.replicas["r0"]
    assert e1.failed(only, "refused", policy, decisive=True, now=0.0)
    assert e1.pick(set(), 1.0) is None
    assert e1.pick(set(), 1.0, panic=True) is only
    assert e1.pick({"r0"}, 1.0, panic=True) is None


def test_draining_replicas_do_not_count_towards_the_share() -> None:
    t = _table(3)
    entry = t.models["m"]
    t.replicas["r0"].state = "draining"
    policy = EjectionPolicy(threshold=1, max_share=0.5, base=10, cap=10)
    assert entry.failed(t.replicas["r1"], "x", policy, decisive=True, now=0.0)
    assert not entry.failed(t.replicas["r2"], "x", policy, decisive=True, now=0.0)  # 1 of 2 ready is the cap


def test_panic_mode_serves_when_every_replica_is_ejected(
        narrow: Callable[..., NarrowEngine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    eng = narrow("fail_first", fails=3)
    state.write([model("m")], [replica("only", "m", eng.endpoint)])
    settings = RouterSettings(**{**QUIET.__dict__, "backoff_base": 60.0, "backoff_max": 60.0})
    router = start_router(state.path, settings=settings)
    for _ in range(3):
        assert chat(router, api_key).status_code == 503
    only = router.replica("only")
    assert not only["routable"] and only["consecutive_failures"] == 3  # ejected for a minute
    r = chat(router, api_key)  # tried anyway, rather than a 503 for everyone
    assert r.status_code == 200, r.text
    only = router.replica("only")
    assert only["routable"] and only["consecutive_failures"] == 0 and only["health"] == "healthy"


def test_one_failure_does_not_eject_a_replica(
        narrow: Callable[..., NarrowEngine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    flaky, good = narrow("fail_first", fails=1), narrow("ok")
    state.write([model("m")], [replica("flaky", "m", flaky.endpoint), replica("good", "m", good.endpoint)])
    router = start_router(state.path, settings=QUIET)
    for _ in range(6):
        assert chat(router, api_key).status_code == 200  # the 502 is retried on the other
    assert flaky.posts >= 2 and flaky.answered >= 1  # it kept getting traffic after its failure
    assert router.replica("flaky")["routable"]


# -- health: busy is not down --------------------------------------------------------------------

def test_health_answers_classified() -> None:
    assert classify(200, b"{}") == "ok"
    assert classify(503, b'{"status":"no slot available"}') == "busy"
    assert classify(429, b"") == "busy"
    assert classify(503, b'{"error":{"message":"Loading model"}}') == "down"
    assert classify(500, b"") == "down"


def test_health_probe_tells_busy_from_down(narrow: Callable[..., NarrowEngine]) -> None:
    settings = RouterSettings(**{**FAST.__dict__, "health_timeout": 0.5})

    async def probes() -> dict[str, str]:
        checker = HealthChecker(None, RoutingTable.empty, settings, lambda: None)  # type: ignore[arg-type]
        try:
            out = {}
            for name, url in (("ok", narrow("ok").endpoint), ("hang", narrow("hang").endpoint),
                              ("no_slot", narrow("no_slot").endpoint), ("loading", narrow("loading").endpoint),
                              ("refused", f"http://127.0.0.1:{free_port()}")):
                out[name] = (await checker.probe(url))[0]
            return out
        finally:
            await checker.close()

    assert asyncio.run(probes()) == {"ok": "ok", "hang": "busy", "no_slot": "busy", "loading": "down",
                                     "refused": "down"}


# -- the real engine, saturated ------------------------------------------------------------------

@pytest.mark.engine
def test_sixteen_concurrent_streams_on_one_saturated_engine_fail_nothing(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    e = engines("busy", parallel=2, ctx=4096)
    state.write([model("tiny")], [replica("busy-0", "tiny", e.endpoint)])
    # Real-world checks: a saturated engine's /health waits behind the streams in its queue.
    settings = RouterSettings(**{**FAST.__dict__, "health_interval": 0.2, "health_timeout": 0.3})
    router = start_router(state.path, settings=settings)
    client = router.client(api_key, timeout=120)
    failures: list[str] = []

    def one_client(n: int) -> int:
        done = 0
        for _ in range(n):
            try:
                chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=64,
                                                             stream=True))
                assert chunks
                done += 1
            except Exception as exc:  # every failure counts, whatever it is
                failures.append(f"{type(exc).__name__}: {exc}")
        return done

    with ThreadPoolExecutor(16) as pool:
        done = sum(pool.map(one_client, [6] * 16))
    assert failures == [], failures[:5]
    assert done == 96
    wait_until(lambda: router.replica("busy-0")["in_flight"] == 0, 10, "in-flight back to 0")
    assert router.replica("busy-0")["routable"]
