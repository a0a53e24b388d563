"""When replicas fail: retries, fallbacks, a hung engine, an engine killed mid-stream, a client
that goes away, and drains that never cut a request."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai
import pytest

from llmgw.router import RouterSettings
from tests.support.net import free_port
from tests.support.router import FAST, HTTP, Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me a long story."}]


def dead_endpoint() -> str:
    """An address where nothing listens (connection refused)."""
    return f"http://127.0.0.1:{free_port()}"


@contextmanager
def holding_server(greeting: bytes | None) -> Iterator[str]:
    """A server that accepts connections, sends `greeting` (after reading the request) or
    nothing at all, and then holds each connection open without another byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if greeting is not None:
                conn.recv(65536)
                conn.sendall(greeting)
            held.append(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        sock.close()


@pytest.fixture
def hung_endpoint() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    with holding_server(None) as url:
        yield url


@pytest.fixture
def stalling_endpoint() -> Iterator[str]:
    """A server that starts an SSE stream, sends one event, then goes silent."""
    event = b'data: {"choices":[{"index":0,"delta":{"content":"hel"}}]}\n\n'
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % len(event) + event + b"\r\n")
    with holding_server(head) as url:
        yield url


def engine_busy(e: Engine) -> bool:
    """Is llama-server processing a request right now (from its own /metrics)?"""
    for line in HTTP.get(e.endpoint + "/metrics", timeout=5).text.splitlines():
        if line.startswith("llamacpp:requests_processing"):
            return float(line.split()[-1]) > 0
    raise AssertionError("llama-server /metrics has no llamacpp:requests_processing")


def test_retry_on_another_replica_then_fallback(engines: Callable[..., Engine], state: StateFile,
                                                start_router: Callable[..., RunningRouter], api_key: str) -> None:
    e = engines("backup")
    state.write([model("primary", fallbacks=("backup",)), model("tiny"), model("backup"), model("lonely")],
                [replica("primary-0", "primary", dead_endpoint()),
                 replica("tiny-dead", "tiny", dead_endpoint()), replica("tiny-live", "tiny", e.endpoint),
                 replica("backup-0", "backup", e.endpoint), replica("lonely-0", "lonely", dead_endpoint())])
    # No active checks here: the requests themselves find the dead replicas (passive marking).
    router = start_router(state.path, settings=RouterSettings(**{**FAST.__dict__, "health_interval": 3600.0}))
    client = router.client(api_key)
    # Primary's only replica refuses connections: the fallback answers.
    reply = client.chat.completions.create(model="primary", messages=MESSAGES, max_tokens=4)
    assert reply.usage is not None and reply.usage.completion_tokens == 4
    primary = router.replica("primary-0")
    assert primary["health"] == "unhealthy" and "Connect" in primary["last_error"]
    assert router.replica("backup-0")["requests"] == 1
    # A dead replica beside a live one: every request still succeeds.
    for _ in range(4):
        assert client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2).choices
    assert router.replica("tiny-live")["requests"] == 4
    # Nothing can answer and there is no fallback: 503 with Retry-After.
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="lonely", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 503 and info.value.response.headers.get("retry-after")
    text = HTTP.get(router.admin_url + "/metrics").text
    assert 'llmgw_upstream_errors_total{kind="connect",model="primary",replica="primary-0"}' in text
    assert 'llmgw_replica_healthy{model="primary",replica="primary-0"} 0.0' in text


def test_active_health_checks_mark_down_and_bring_back(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    e = engines("flaky")
    state.write([model("tiny")], [replica("r", "tiny", e.endpoint)])
    router = start_router(state.path)
    client = router.client(api_key)
    wait_until(lambda: router.replica("r")["health"] == "healthy", 10, "first health check")
    e.kill()
    wait_until(lambda: router.replica("r")["health"] == "unhealthy", 10, "the dead engine to be noticed")
    assert "health check failed" in router.replica("r")["last_error"]
    engines("flaky", port=e.port)  # the same address comes back
    wait_until(lambda: router.replica("r")["health"] == "healthy", 15, "the engine to be healthy again")
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2).choices


def test_hung_replica_times_out_before_first_byte_and_falls_back(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str, hung_endpoint: str) -> None:
    e = engines("backup")
    state.write([model("stuck", fallbacks=("backup",)), model("backup")],
                [replica("stuck-0", "stuck", hung_endpoint), replica("backup-0", "backup", e.endpoint)])
    router = start_router(state.path, settings=RouterSettings(**{**FAST.__dict__, "first_byte_timeout": 1.0,
                                                                 "health_interval": 60.0}))
    reply = router.client(api_key).chat.completions.create(model="stuck", messages=MESSAGES, max_tokens=3)
    assert reply.choices[0].message.content is not None
    stuck = router.replica("stuck-0")
    # One timeout counts a failure; it takes eject_after_failures in a row to eject (test_router_availability).
    assert stuck["consecutive_failures"] == 1 and "no first byte within 1 s" in stuck["last_error"]
    assert stuck["in_flight"] == 0


def test_stream_that_stalls_ends_with_an_error_event(state: StateFile, start_router: Callable[..., RunningRouter],
                                                     api_key: str, stalling_endpoint: str) -> None:
    state.write([model("slow")], [replica("slow-0", "slow", stalling_endpoint)])
    router = start_router(state.path, settings=RouterSettings(**{**FAST.__dict__, "chunk_gap_timeout": 1.0,
                                                                 "health_interval": 3600.0}))
    stream = router.client(api_key).chat.completions.create(model="slow", messages=MESSAGES, stream=True)
    seen: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")
    assert seen == ["hel"]
    assert "no data for 1 s inside the response" in info.value.message
    slow = router.replica("slow-0")
    assert slow["in_flight"] == 0 and slow["consecutive_failures"] == 1


def test_engine_killed_mid_stream_gives_the_client_an_error(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    e = engines("doomed", parallel=1, ctx=16384)
    state.write([model("tiny")], [replica("doomed-0", "tiny", e.endpoint)])
    router = start_router(state.path)
    stream = router.client(api_key, timeout=30).chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=16000, stream=True)
    got = 0
    with pytest.raises(openai.APIError) as info:
        for _chunk in stream:
            got += 1
            if got == 3:
                e.kill()
    assert got >= 3
    assert "failed mid-stream" in info.value.message
    assert router.replica("doomed-0")["in_flight"] == 0
    text = HTTP.get(router.admin_url + "/metrics").text
    assert 'llmgw_upstream_errors_total{kind="mid_response",model="tiny",replica="doomed-0"}' in text


def test_client_disconnect_cancels_the_engine_request(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    e = engines("long", parallel=1, ctx=16384)
    state.write([model("tiny")], [replica("long-0", "tiny", e.endpoint)])
    router = start_router(state.path)
    stream = router.client(api_key).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16000,
                                                            stream=True)
    for i, _ in enumerate(stream):
        if i == 5:
            break
    assert engine_busy(e)
    stream.close()
    wait_until(lambda: not engine_busy(e), 10, "llama-server to stop generating")
    wait_until(lambda: router.replica("long-0")["in_flight"] == 0, 5, "router in-flight back to 0")
    assert 'status="499"' in HTTP.get(router.admin_url + "/metrics").text


def test_drain_during_a_stream(engines: Callable[..., Engine], state: StateFile,
                               start_router: Callable[..., RunningRouter], api_key: str) -> None:
    a, b = engines("a", parallel=1, ctx=16384), engines("b", parallel=1, ctx=16384)
    state.write([model("tiny")], [replica("r-a", "tiny", a.endpoint), replica("r-b", "tiny", b.endpoint)])
    router = start_router(state.path)
    client = router.client(api_key)
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12000, stream=True,
                                            temperature=0)
    it = iter(stream)
    text = [next(it).choices[0].delta.content or ""]
    busy = next(r for r in router.admin("/api/v1/replicas")["replicas"] if r["in_flight"] == 1)
    other = "r-b" if busy["id"] == "r-a" else "r-a"
    served_before = router.replica(busy["id"])["requests"]
    router.wait_serial(state.set_replica_state(busy["id"], "draining").serial)
    assert router.replica(busy["id"])["state"] == "draining"
    assert router.replica(busy["id"])["in_flight"] == 1  # still streaming
    for _ in range(3):  # new work goes elsewhere
        assert client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2).choices
    assert router.replica(busy["id"])["requests"] == served_before
    assert router.replica(other)["requests"] == 3
    finish = None
    for chunk in it:  # the drained stream runs to its end
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "length"
    drained = router.replica(busy["id"])
    assert drained["in_flight"] == 0 and drained["state"] == "draining" and "last_used" in drained
    models = router.admin("/api/v1/models")["models"][0]
    assert models["replicas"]["draining"] == 1 and models["replicas"]["routable"] == 1
