"""A hostile client against the real router over TCP: header floods, slow and idle
connections, connection floods, bad JSON, a state file that is not UTF-8.

Each test talks raw HTTP through a socket to `RouterServer` (what `llmgw router serve`
runs) on loopback, so nothing in between buffers, times or fixes up the attack.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from llmgw.router import RouterSettings
from llmgw.store import Store
from tests.support.router import FAST, HTTP, RunningRouter, StateFile, model, wait_until

LIMITS = RouterSettings(**{**FAST.__dict__, "max_header_bytes": 8192, "max_headers": 50,
                           "header_timeout": 1.0, "body_timeout": 1.0, "keep_alive_timeout": 1.0,
                           "max_connections": 8})
# How long a test waits for the router to act on a limit of 1 s (generous: a busy machine).
PATIENCE = 15.0


@pytest.fixture
def router(state: StateFile, start_router: Callable[..., RunningRouter]) -> RunningRouter:
    state.write([model("tiny")], [])
    return start_router(state.path, settings=LIMITS)


@pytest.fixture
def connect(router: RunningRouter) -> Iterator[Callable[[], socket.socket]]:
    opened: list[socket.socket] = []

    def make() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", router.server.addresses["client"][1]), timeout=PATIENCE)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def read_response(s: socket.socket) -> bytes:
    """Everything the router sends until it closes the connection (or PATIENCE passes)."""
    out = b""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        except TimeoutError:
            raise AssertionError(f"the router neither answered nor closed; got {out[:200]!r}") from None
        if not chunk:
            break
        out += chunk
    return out


def status_and_error(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    err = json.loads(body)["error"]
    assert isinstance(err, dict) and err["message"]
    return status, err


def router_healthy(router: RunningRouter) -> bool:
    return HTTP.get(router.base_url + "/health", timeout=5).json() == {"status": "ok"}


def test_a_streamed_header_is_cut_off_at_the_limit(router: RunningRouter,
                                                   connect: Callable[[], socket.socket]) -> None:
    s = connect()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Flood: ")
    sent = 0
    chunk = b"a" * 65536
    try:
        while sent < 8 * 2**20:  # 8 MiB of one header, unless the router stops it first
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    raw = read_response(s)
    assert raw, f"the router took {sent} bytes of one header and never refused it"
    status, err = status_and_error(raw)
    assert status == 431 and err["code"] == "request_header_fields_too_large"
    assert router_healthy(router)


def test_too_many_headers_are_refused(connect: Callable[[], socket.socket]) -> None:
    s = connect()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n")
    status, err = status_and_error(read_response(s))
    assert status == 431 and "headers" in str(err["message"])


def test_headers_trickling_in_time_out(connect: Callable[[], socket.socket]) -> None:
    s = connect()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    for _ in range(3):  # a byte now and then: each arrives well inside the idle timeout
        time.sleep(0.3)  # the attacker's pace, not a wait for the router
        s.sendall(b"X")
    status, err = status_and_error(read_response(s))
    assert status == 408 and err["code"] == "request_timeout"
    assert time.monotonic() - started < PATIENCE


def test_a_body_trickling_in_times_out(router: RunningRouter, connect: Callable[[], socket.socket]) -> None:
    key = router.store.create_key("slow")[1]
    s = connect()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
              + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\": ")
    status, err = status_and_error(read_response(s))
    assert status == 408 and "body" in str(err["message"])
    assert router_healthy(router)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_trickled_a_few_bytes_every_2_s_is_cut_off(state: StateFile,
                                                          start_router: Callable[..., RunningRouter],
                                                          framing: str) -> None:
    """#32: the body deadline held (a minute by default), and for that minute a client sending
    three bytes every 2 s kept its connection; enough of them hold every connection."""
    state.write([model("tiny")], [])
    rr = start_router(state.path)  # the default body_timeout (60 s) and rate check
    key = rr.store.create_key("trickle")[1]
    s = socket.create_connection(("127.0.0.1", rr.server.addresses["client"][1]), timeout=PATIENCE)
    try:
        length = b"Transfer-Encoding: chunked" if framing == "chunked" else b"Content-Length: 100000"
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
                  + b"\r\nContent-Type: application/json\r\n" + length + b"\r\n\r\n")
        piece = b"3\r\n{\"m\r\n" if framing == "chunked" else b"{\"m"
        planned, sent, raw = 15, 0, b""  # 30 s of it: longer than the first look at its rate
        s.settimeout(2.0)  # the attacker's pace: the next piece goes when 2 s pass without an answer
        while sent < planned and not raw:
            try:
                s.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            try:
                raw = s.recv(65536) or b"-"
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
        s.settimeout(PATIENCE)
        raw = raw.removesuffix(b"-") + read_response(s)
        assert raw, f"the router took {sent} pieces 2 s apart and closed without an answer"
        status, err = status_and_error(raw)
        assert status == 408 and err["code"] == "request_timeout" and "bytes/s" in str(err["message"]), err
        assert sent < planned, f"the router held a trickled body for {sent * 2} s"
    finally:
        s.close()
    assert router_healthy(rr)


def test_an_idle_connection_is_closed(connect: Callable[[], socket.socket]) -> None:
    s = connect()  # never sends a byte
    assert read_response(s) == b""


def test_a_connection_flood_gets_503(router: RunningRouter, connect: Callable[[], socket.socket]) -> None:
    held = [connect() for _ in range(LIMITS.max_connections)]
    wait_until(lambda: len(router.server._servers[0].server_state.connections) >= LIMITS.max_connections,
               PATIENCE, "the router to hold every connection")
    extra = connect()
    status, err = status_and_error(read_response(extra))
    assert status == 503 and err["code"] == "too_many_connections"
    for s in held:
        s.close()
    wait_until(lambda: router_healthy(router), PATIENCE, "the router to serve again")


@pytest.mark.parametrize("body", [
    b"[" * 200_000 + b"]" * 200_000,                     # deeper than Python's stack
    b'{"model": "tiny", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'["model", "tiny"]',                                # not an object
    b'"tiny"',
    b'{"model": "tiny\xff\xfe"}',                         # not UTF-8
    b"\xff\xfe{\x00}\x00",
    b"",
], ids=["nested-array", "nested-value", "array", "string", "bad-utf8", "utf16-bom", "empty"])
def test_bad_json_gets_an_openai_error(router: RunningRouter, body: bytes) -> None:
    key = router.store.create_key(f"k{time.monotonic_ns()}")[1]
    r = HTTP.post(router.base_url + "/v1/chat/completions", content=body,
                  headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_the_state_watcher_survives_a_file_that_is_not_utf8(router: RunningRouter, state: StateFile) -> None:
    good = state.read()
    state.path.write_bytes(b'{"serial": 99, "lineage": "\xff\xfe"}')
    wait_until(lambda: router.admin("/api/v1/status")["state_error"], PATIENCE, "the router to report the file")
    assert "state file" in router.admin("/api/v1/status")["state_error"]
    assert router.admin("/api/v1/status")["serial"] == good.serial  # still routing by the last good state
    fixed = good.model_copy(update={"serial": good.serial + 5, "models": [model("tiny"), model("other")]})
    state.path.write_text(fixed.to_json())
    router.wait_serial(fixed.serial)  # the watcher is still running: it loads the next good file
    assert router.admin("/api/v1/status")["state_error"] is None


def test_the_store_password_is_not_on_the_status_page(state: StateFile, sqlite_store: Store,
                                                      start_router: Callable[..., RunningRouter]) -> None:
    state.write([], [])
    rr = start_router(state.path)
    rr.store.url = "postgresql://llmgw:p@ss@db.example:5432/llmgw?sslmode=require&password=p@ss"
    shown = rr.admin("/api/v1/status")["store"]
    assert "p@ss" not in shown and "ss@" not in shown
    assert shown == "postgresql://llmgw:***@db.example:5432/llmgw?sslmode=require&password=***"
