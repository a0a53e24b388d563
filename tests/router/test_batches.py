"""The OpenAI Files and Batch APIs with the real `openai` client against real routers: a
batch of 200 chat requests run by a real llama-server while an interactive client runs,
usage charged to the key; a router SIGKILLed mid-batch and restarted resumes it without
sending any request twice (counted at the engine, through a counting proxy in front of it);
uploads refused line by line; another group's key sees nothing; cancel stops what has not
started."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmgw.router import RouterSettings
from llmgw.store import Store, open_store
from tests.support.net import free_port
from tests.support.router import CLIENTS, FAST, HTTP, Engine, RunningRouter, StateFile, model, replica
from tests.support.waiting import wait_until

BATCH_FAST = RouterSettings(**{**FAST.__dict__, "batch_poll_interval": 0.2, "batch_lease_ttl": 3.0,
                               "batch_concurrency": 8})


def _jsonl(n: int, *, url: str = "/v1/chat/completions", model_name: str = "tiny") -> bytes:
    return b"".join(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url,
                                "body": {"model": model_name, "max_tokens": 2, "temperature": 0,
                                         "messages": [{"role": "user", "content": f"Say {i}."}]}}).encode() + b"\n"
                    for i in range(n))


@dataclass
class Counting:
    """A proxy in front of an engine counting each chat request it forwards by its prompt;
    `hold()` makes it keep every request after the next `after` waiting until `release()`."""

    url: str = ""
    seen: Counter[str] = field(default_factory=Counter)
    held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: threading.Event = field(default_factory=threading.Event)
    hold_after: int | None = None

    def count(self) -> int:
        with self.lock:
            return sum(self.seen.values())


@contextlib.contextmanager
def counting_proxy(upstream: str) -> Iterator[Counting]:
    rec = Counting()
    rec.gate.set()
    client = httpx.Client(timeout=60)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self, body: bytes | None) -> None:
            r = client.request(self.command, upstream + self.path, content=body,
                               headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
            with contextlib.suppress(OSError):  # a router killed meanwhile is not there to read it
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/chat/completions":
                prompt = json.loads(body)["messages"][-1]["content"]
                with rec.lock:
                    rec.seen[prompt] += 1
                    hold = rec.hold_after is not None and sum(rec.seen.values()) > rec.hold_after
                    if hold:
                        rec.held += 1
                if hold:
                    rec.gate.wait()
            self._forward(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield rec
    finally:
        rec.gate.set()
        server.shutdown()
        server.server_close()
        client.close()


def _upload(client: openai.OpenAI, data: bytes) -> Any:
    return client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(ln) for ln in client.files.content(file_id).text.splitlines()]


def _usage_of(store: Store, key_id: str) -> tuple[int, int, int]:
    rows = [r for r in store.usage() if r.key_id == key_id]
    return (sum(r.requests for r in rows), sum(r.prompt_tokens for r in rows),
            sum(r.completion_tokens for r in rows))


def _interactive(client: openai.OpenAI, stop: threading.Event, done: list[int], failed: list[BaseException]) -> None:
    while not stop.is_set():
        try:
            client.chat.completions.create(model="tiny", max_tokens=2,
                                           messages=[{"role": "user", "content": "Hello."}])
            done.append(1)
        except BaseException as exc:  # reported to the test
            failed.append(exc)
            return


@pytest.mark.engine
def test_a_batch_of_200_completes_beside_interactive_traffic(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    e = engines("tiny", parallel=4)
    with counting_proxy(e.endpoint) as counted:
        state.write([model("tiny")], [replica("tiny-0", "tiny", counted.url)])
        sqlite_store.set_group("team", tokens_per_day=10_000_000)
        batch_key_rec, batch_key = sqlite_store.create_key("batcher", "team")
        _, chat_key = sqlite_store.create_key("chatter")
        router = start_router(state.path, settings=BATCH_FAST)
        client, chat = router.client(batch_key), router.client(chat_key)

        uploaded = _upload(client, _jsonl(200))
        assert (uploaded.object, uploaded.purpose, uploaded.status, uploaded.filename) == \
            ("file", "batch", "processed", "requests.jsonl")
        assert uploaded.bytes == len(_jsonl(200))
        assert client.files.retrieve(uploaded.id).id == uploaded.id
        assert uploaded.id in [f.id for f in client.files.list(purpose="batch")]
        assert client.files.content(uploaded.id).content == _jsonl(200)

        stop, done, failed = threading.Event(), list[int](), list[BaseException]()
        talker = threading.Thread(target=_interactive, args=(chat, stop, done, failed), daemon=True)
        talker.start()
        try:
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h", metadata={"job": "nightly"})
            assert batch.status in ("validating", "in_progress") and batch.metadata == {"job": "nightly"}
            assert batch.request_counts is not None and batch.request_counts.total == 200
            assert batch.id in [b.id for b in client.batches.list()]
            finished = wait_until(lambda: (b := client.batches.retrieve(batch.id)).status == "completed" and b,
                                  120, "the batch to complete")
        finally:
            stop.set()
            talker.join(60)
        assert not failed, failed
        assert done, "the interactive client got no answer while the batch ran"

        assert finished.request_counts is not None
        assert (finished.request_counts.completed, finished.request_counts.failed) == (200, 0)
        assert finished.error_file_id is None and finished.completed_at is not None
        out = _lines(client, finished.output_file_id)
        assert sorted(o["custom_id"] for o in out) == sorted(f"req-{i}" for i in range(200))
        assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in out)
        assert all(o["response"]["body"]["choices"][0]["message"]["role"] == "assistant" for o in out)
        # Each request reached the engine once.
        assert counted.seen["Hello."] == len(done)
        assert {k: v for k, v in counted.seen.items() if k != "Hello."} == {f"Say {i}.": 1 for i in range(200)}

        # Usage: charged to the batch's key (its group's quota counts it), equal to the output's.
        prompt = sum(o["response"]["body"]["usage"]["prompt_tokens"] for o in out)
        completion = sum(o["response"]["body"]["usage"]["completion_tokens"] for o in out)
        assert finished.usage is not None
        assert (finished.usage.input_tokens, finished.usage.output_tokens) == (prompt, completion)
        wait_until(lambda: _usage_of(sqlite_store, batch_key_rec.id) == (200, prompt, completion), 10,
                   "the batch's usage in the store")


@pytest.mark.engine
def test_a_group_token_quota_binds_batch_requests(engines: Callable[..., Engine], state: StateFile,
                                                   start_router: Callable[..., RunningRouter],
                                                   sqlite_store: Store) -> None:
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    # Room for about ten of these requests' real tokens (about 28 each), not for twenty: near the
    # limit the router counts prompts exactly (tokenize.py), so what binds is what they cost.
    sqlite_store.set_group("small", tokens_per_day=300)
    _, key = sqlite_store.create_key("batcher", "small")
    router = start_router(state.path, settings=BATCH_FAST)
    client = router.client(key)
    batch = client.batches.create(input_file_id=_upload(client, _jsonl(20)).id,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    finished = wait_until(lambda: (b := client.batches.retrieve(batch.id)).status == "completed" and b, 60,
                          "the batch to end")
    assert finished.request_counts is not None
    assert 0 < finished.request_counts.completed < 20
    assert finished.request_counts.completed + finished.request_counts.failed == 20
    errors = _lines(client, finished.error_file_id)
    assert len(errors) == finished.request_counts.failed
    assert {x["response"]["status_code"] for x in errors} == {429}
    assert {x["response"]["body"]["error"]["code"] for x in errors} == {"insufficient_quota"}


def test_uploads_are_checked_line_by_line_and_other_groups_see_nothing(
        state: StateFile, start_router: Callable[..., RunningRouter], sqlite_store: Store) -> None:
    # No engine: the model exists (a replica nobody answers at), so uploads name it.
    state.write([model("tiny")], [replica("tiny-0", "tiny", f"http://127.0.0.1:{free_port()}")])
    sqlite_store.set_group("a")
    sqlite_store.set_group("b")
    _, key_a = sqlite_store.create_key("a1", "a")
    _, key_a2 = sqlite_store.create_key("a2", "a")
    _, key_b = sqlite_store.create_key("b1", "b")
    router = start_router(state.path, settings=BATCH_FAST)
    a, a2, b = router.client(key_a), router.client(key_a2), router.client(key_b)

    good = _jsonl(3).splitlines(keepends=True)
    cases = {
        b"".join([good[0], good[0]]): "line 2: custom_id 'req-0' is used on line 1 too",
        b"".join([good[0], b"{not json\n"]): "line 2 is not valid JSON",
        b"".join([good[0], b"\n", good[1]]): "line 2 is empty",
        good[0].replace(b'"POST"', b'"GET"'): "line 1: `method` must be \"POST\"",
        good[0].replace(b"/v1/chat/completions", b"/v1/moderations"): "line 1: `url` must be one of",
        good[0].replace(b'"tiny"', b'"nope"'): "line 1: the model `nope` does not exist",
        good[0].replace(b'"max_tokens"', b'"stream": true, "max_tokens"'): "line 1: a batch request cannot be "
                                                                           "streamed",
        b"": "the file holds no requests",
    }
    for data, message in cases.items():
        with pytest.raises(openai.BadRequestError) as info:
            _upload(a, data)
        assert message in info.value.message, (data, info.value.message)
    with pytest.raises(openai.BadRequestError, match="purpose"):
        a.files.create(file=("x.jsonl", io.BytesIO(_jsonl(1))), purpose="fine-tune")

    f = _upload(a, _jsonl(3))
    assert a2.files.retrieve(f.id).id == f.id  # the same group
    for call in (lambda: b.files.retrieve(f.id), lambda: b.files.content(f.id), lambda: b.files.delete(f.id),
                 lambda: b.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert [x.id for x in b.files.list()] == []
    with pytest.raises(openai.BadRequestError, match="endpoint is /v1/embeddings"):
        a.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")

    # Nothing answers for the model: every request is refused before an engine sees it, and
    # stays pending; cancel stops the batch with nothing sent.
    batch = a.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert [x.id for x in b.batches.list()] == []
    with pytest.raises(openai.NotFoundError):
        b.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        b.batches.cancel(batch.id)
    with pytest.raises(openai.BadRequestError, match="input of batch"):
        a.files.delete(f.id)
    wait_until(lambda: a.batches.retrieve(batch.id).status == "in_progress", 10, "the batch to start")
    assert a.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    ended = wait_until(lambda: (x := a.batches.retrieve(batch.id)).status == "cancelled" and x, 30, "the cancel")
    assert ended.request_counts is not None and (ended.request_counts.completed, ended.request_counts.failed) == (0, 0)
    assert ended.cancelled_at is not None and ended.output_file_id is None and ended.error_file_id is None
    with pytest.raises(openai.BadRequestError, match="cannot cancel"):
        a.batches.cancel(batch.id)
    assert a.files.delete(f.id).deleted
    with pytest.raises(openai.NotFoundError):
        a.files.retrieve(f.id)
    r = HTTP.get(router.base_url + "/v1/batches/nope", headers={"Authorization": f"Bearer {key_a}"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "batch_not_found"
    r = HTTP.put(router.base_url + "/v1/files", headers={"Authorization": f"Bearer {key_a}"})
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"


# -- a router killed mid-batch ---------------------------------------------------------------
def _serve(tmp_path: Path, state: StateFile, store_url: str, port: int, admin: int,
           log: Any, lease_ttl: float = 3) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from llmgw.cli import main; main()", "router", "serve", "--state", str(state.path),
         "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}", "--store", store_url,
         "--workers", "1", "--health-interval", "0.5", "--setting", f"batch_lease_ttl={lease_ttl}",
         "--setting", "batch_poll_interval=0.2", "--setting", "batch_concurrency=8",
         "--setting", "usage_flush_interval=0.2", "--setting", f"batch_dir={tmp_path / 'files'}"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _up(proc: subprocess.Popen[bytes], admin: int, logfile: Path) -> None:
    def up() -> bool:
        assert proc.poll() is None, logfile.read_text()
        try:
            return HTTP.get(f"http://127.0.0.1:{admin}/health").status_code == 200
        except httpx.HTTPError:
            return False
    wait_until(up, 30, "llmgw router serve to listen")


@pytest.mark.engine
def test_a_router_killed_mid_batch_resumes_without_sending_anything_twice(
        tmp_path: Path, engines: Callable[..., Engine], state: StateFile) -> None:
    e = engines("tiny", parallel=4)
    store_url = f"sqlite:///{tmp_path}/store.sqlite"
    store = open_store(store_url)
    _, key = store.create_key("batcher")
    port, admin = free_port(), free_port()
    logfile = tmp_path / "router.log"
    with counting_proxy(e.endpoint) as counted, logfile.open("wb") as log:
        state.write([model("tiny")], [replica("tiny-0", "tiny", counted.url)])
        counted.hold_after = 60  # from the 61st request on, the engine's answers wait: in flight at the kill
        counted.gate.clear()
        proc = _serve(tmp_path, state, store_url, port, admin, log)
        try:
            _up(proc, admin, logfile)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=60)
            CLIENTS.append(client)
            batch = client.batches.create(input_file_id=_upload(client, _jsonl(200)).id,
                                          endpoint="/v1/chat/completions", completion_window="24h")
            # As many in flight at the engine as it has slots (admission sends no more than that).
            wait_until(lambda: counted.held >= 4, 60, "the batch to be mid-way, requests in flight")
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            in_flight = counted.held
            counted.hold_after = None
            counted.gate.set()  # the held requests reach the engine now, for a router that is gone

            proc = _serve(tmp_path, state, store_url, port, admin, log)
            _up(proc, admin, logfile)
            finished = wait_until(lambda: (b := client.batches.retrieve(batch.id)).status == "completed" and b,
                                  120, "the restarted router to finish the batch")
            out, errors = _lines(client, finished.output_file_id), _lines(client, finished.error_file_id)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            store.close()
    # Nothing reached the engine twice. What the killed router had marked started and not
    # recorded (the requests at the engine, and any it had not sent yet: waiting for a
    # slot in its admission) is reported as interrupted, never sent again.
    assert counted.seen.most_common(1)[0][1] == 1
    assert finished.request_counts is not None
    failed = finished.request_counts.failed
    assert in_flight <= failed <= 8  # batch_concurrency: the most a crash can catch
    assert finished.request_counts.completed == 200 - failed
    assert sorted([o["custom_id"] for o in out + errors]) == sorted(f"req-{i}" for i in range(200))
    assert len(errors) == failed
    assert {x["error"]["code"] for x in errors} == {"request_interrupted"}
    assert all(x["response"] is None for x in errors)
    prompt = {f"req-{i}": f"Say {i}." for i in range(200)}
    assert all(counted.seen[prompt[o["custom_id"]]] == 1 for o in out)  # each answered request: sent once
    # The interrupted: each sent once (the held ones, any answered but not recorded) or never.
    assert in_flight <= sum(counted.seen[prompt[x["custom_id"]]] for x in errors) <= failed


# How long a stopping router gives its batch requests in flight (batch_lease_ttl): room for a
# loaded machine's engine to answer them; a routine stop hands the lease back, so the next
# router does not wait it out. With 3 s, as the kill test uses, a CI run once ended this test
# with one of the 200 failed: most likely a request still unanswered when the 3 s were up.
DRAIN = 20


@pytest.mark.engine
def test_a_router_stopped_mid_batch_finishes_what_it_sent(
        tmp_path: Path, engines: Callable[..., Engine], state: StateFile) -> None:
    """SIGTERM (a routine restart): the router sends nothing more, waits for the requests in
    flight and records them, so the next router finishes the batch with none failed."""
    e = engines("tiny", parallel=4)
    store_url = f"sqlite:///{tmp_path}/store.sqlite"
    store = open_store(store_url)
    _, key = store.create_key("batcher")
    port, admin = free_port(), free_port()
    logfile = tmp_path / "router.log"
    with counting_proxy(e.endpoint) as counted, logfile.open("wb") as log:
        state.write([model("tiny")], [replica("tiny-0", "tiny", counted.url)])
        counted.hold_after = 60
        counted.gate.clear()
        proc = _serve(tmp_path, state, store_url, port, admin, log, lease_ttl=DRAIN)
        try:
            _up(proc, admin, logfile)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=60)
            CLIENTS.append(client)
            batch = client.batches.create(input_file_id=_upload(client, _jsonl(200)).id,
                                          endpoint="/v1/chat/completions", completion_window="24h")
            wait_until(lambda: counted.held >= 4, 60, "the batch to be mid-way, requests in flight")
            proc.send_signal(signal.SIGTERM)
            wait_until(lambda: b"Shutting down" in logfile.read_bytes(), 30, "the router to be stopping")
            counted.hold_after = None
            counted.gate.set()  # the engine answers what it holds: the stopping router records it
            assert proc.wait(60) == 0
            sent_before = counted.count()
            assert 60 < sent_before < 200
            proc = _serve(tmp_path, state, store_url, port, admin, log, lease_ttl=DRAIN)
            _up(proc, admin, logfile)
            finished = wait_until(lambda: (b := client.batches.retrieve(batch.id)).status == "completed" and b,
                                  120, "the restarted router to finish the batch")
            errors = _lines(client, finished.error_file_id)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            store.close()
    assert finished.request_counts is not None
    assert (finished.request_counts.completed, finished.request_counts.failed) == (200, 0), \
        (errors, logfile.read_text()[-4000:])
    assert counted.seen == Counter({f"Say {i}.": 1 for i in range(200)})


def test_limits_and_expiry(state: StateFile, start_router: Callable[..., RunningRouter], sqlite_store: Store) -> None:
    """OpenAI's limits (50,000 requests, 200 MB) refused with the limit named; a batch past
    its completion window ends `expired`, what was never sent in its error file."""
    state.write([model("tiny")], [replica("tiny-0", "tiny", f"http://127.0.0.1:{free_port()}")])
    _, key = sqlite_store.create_key("k")
    router = start_router(state.path, settings=BATCH_FAST)
    client = router.client(key, timeout=120)
    line = b'{"custom_id":"%d","method":"POST","url":"/v1/embeddings","body":{"model":"tiny","input":"x"}}\n'
    with pytest.raises(openai.BadRequestError, match="more than 50000 requests"):
        _upload(client, b"".join(line % i for i in range(50_001)))
    # 300 MB declared: refused before a byte of it is read.
    with socket.create_connection(("127.0.0.1", router.server.addresses["client"][1]), timeout=30) as sock:
        sock.sendall(b"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
                     + b"\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 314572800\r\n\r\n")
        answer = b""
        while b"}}" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"209715200 bytes" in answer, answer

    batch = client.batches.create(input_file_id=_upload(client, _jsonl(3)).id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    assert batch.expires_at == batch.created_at + 24 * 3600
    wait_until(lambda: client.batches.retrieve(batch.id).status == "in_progress", 10, "the batch to start")
    # Its window ends now (as 24 hours would): the requests nobody could answer are not sent.
    db = sqlite3.connect(str(sqlite_store.path))  # type: ignore[attr-defined]
    with db:
        db.execute("UPDATE llmgw_batches SET expires_at = ? WHERE id = ?", (int(time.time()) - 1, batch.id))
    db.close()
    ended = wait_until(lambda: (b := client.batches.retrieve(batch.id)).status == "expired" and b, 30, "expiry")
    assert ended.expired_at is not None and ended.output_file_id is None
    assert ended.request_counts is not None and ended.request_counts.failed == 3
    errors = _lines(client, ended.error_file_id)
    assert sorted(x["custom_id"] for x in errors) == ["req-0", "req-1", "req-2"]
    assert {x["error"]["code"] for x in errors} == {"batch_expired"}


@pytest.mark.postgres
@pytest.mark.engine
def test_two_routers_on_one_postgres_store_run_a_batch_once(
        tmp_path: Path, engines: Callable[..., Engine], state: StateFile,
        start_router: Callable[..., RunningRouter], pg_url: str) -> None:
    e = engines("tiny", parallel=4)
    stores = [open_store(pg_url), open_store(pg_url)]
    try:
        _, key = stores[0].create_key("batcher")
        # One batch per router at a time: the second batch is the other router's to claim.
        settings = RouterSettings(**{**BATCH_FAST.__dict__, "batch_dir": str(tmp_path / "shared-files"),
                                     "batch_max_running": 1})
        with counting_proxy(e.endpoint) as counted:
            state.write([model("tiny")], [replica("tiny-0", "tiny", counted.url)])
            one, two = (start_router(state.path, store=s, settings=settings) for s in stores)
            client = one.client(key)
            batches = [client.batches.create(input_file_id=_upload(client, _jsonl(100)).id,
                                             endpoint="/v1/chat/completions", completion_window="24h")
                       for _ in range(2)]
            other = two.client(key)  # the second router answers for the same records
            for b in batches:
                wait_until(lambda b=b: other.batches.retrieve(b.id).status == "completed", 120, "the batches")
            # Two batches of the same 100 prompts: each prompt reached the engine exactly twice.
            assert counted.seen == Counter({f"Say {i}.": 2 for i in range(100)})
            for b in batches:
                out = _lines(other, other.batches.retrieve(b.id).output_file_id)
                assert sorted(o["custom_id"] for o in out) == sorted(f"req-{i}" for i in range(100))
            for router in (one, two):  # both took part
                assert 'llmgw_requests_total{model="tiny",status="200"}' in HTTP.get(router.admin_url + "/metrics").text
    finally:
        for s in stores:
            s.close()
