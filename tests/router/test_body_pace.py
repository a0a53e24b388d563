"""The body's pace (llmgw.router.limits): a slow but honest upload is not cut off by the
rate check, and a fast one that never ends is still cut off at body_timeout.

The attack side (a trickled body, cut at the first look at its rate) is in
tests/security/test_router_limits.py; these keep the check from catching honest clients
and from stretching the deadline. Raw HTTP over a socket to a real RouterServer.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

from llmgw.router import RouterSettings
from tests.security.test_router_limits import PATIENCE, read_response, status_and_error
from tests.support.router import FAST, RunningRouter, StateFile, model

PACE = RouterSettings(**{**FAST.__dict__, "body_timeout": 4.0, "body_check_interval": 0.5,
                         "body_min_rate": 1024.0, "keep_alive_timeout": 1.0})


def _send_paced(rr: RunningRouter, total: int, piece: int, every: float) -> tuple[bytes, int]:
    """A JSON body of `total` bytes, `piece` bytes every `every` seconds (the client's pace)."""
    key = rr.store.create_key(f"pace{time.monotonic_ns()}")[1]
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x" * total}]}).encode()
    s = socket.create_connection(("127.0.0.1", rr.server.addresses["client"][1]), timeout=PATIENCE)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
                  + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        sent = 0
        s.settimeout(every)
        while sent < len(body):
            try:
                s.sendall(body[sent:sent + piece])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += piece
            try:
                early = s.recv(65536)  # an answer before the body ended: the router cut it off
            except TimeoutError:
                continue
            s.settimeout(PATIENCE)
            return early + read_response(s), sent
        s.settimeout(PATIENCE)
        return read_response(s), sent
    finally:
        s.close()


def test_an_upload_above_the_minimum_rate_is_not_cut_off(state: StateFile,
                                                         start_router: Callable[..., RunningRouter]) -> None:
    state.write([model("tiny")], [])  # no replica: a body read whole is answered 503
    rr = start_router(state.path, settings=PACE)
    raw, sent = _send_paced(rr, total=24 * 1024, piece=2048, every=0.25)  # 8 KiB/s for 3 s: past 5 looks
    status, err = status_and_error(raw)
    assert status == 503 and err["code"] == "no_replica_available", (status, err, sent)


def test_a_fast_body_that_never_ends_is_cut_off_at_body_timeout(state: StateFile,
                                                                start_router: Callable[..., RunningRouter]) -> None:
    state.write([model("tiny")], [])
    rr = start_router(state.path, settings=PACE)
    raw, sent = _send_paced(rr, total=10 * 2**20, piece=4096, every=0.1)  # 40 KiB/s, for minutes
    status, err = status_and_error(raw)
    assert status == 408 and "within 4 s" in str(err["message"]), (status, err)
    assert sent < 10 * 2**20
