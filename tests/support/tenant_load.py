"""Closed-loop load for the tenants tests and bench: streamed chat requests, timed per request.

    python -m tests.support.tenant_load URL KEY --clients 8 [--prompt-words 200] [--max-tokens 2]
                                        [--priority batch]

Runs `--clients` loops, each sending its next request when the last one ended, until its
stdin closes (the test or bench that started it is done with the load); then prints one
JSON object: every request's start, time to first token and end, and its HTTP status. A
separate process, so the load's own client work never competes for the interpreter lock
of the router the tests run in a thread.

`one_request` is the same request timed the same way, for the light client in-process;
`load(...)` runs this module for the length of a `with` block; `queue_length` reads the
router's queue gauge. tests/router/test_admission_llama.py and bench/tenants/run.py use them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx


@dataclass
class Timed:
    start: float  # time.monotonic(): comparable across processes on one host
    ttft: float | None  # seconds to the first content event; None when it failed
    end: float
    status: int
    passed: int | None  # the router's x-llmgw-queue-passed: requests started while this one waited
    queue_ms: int | None  # the router's x-llmgw-queue-ms


def prompt(words: int, salt: str) -> str:
    """A prompt of about `words` words; `salt` first, so no two requests share a cached prefix."""
    return salt + " " + " ".join(f"w{i % 97}" for i in range(words))


def one_request(http: httpx.Client, url: str, key: str, *, model: str, words: int, max_tokens: int,
                salt: str, priority: str | None = None) -> Timed:
    headers = {"Authorization": f"Bearer {key}"}
    if priority:
        headers["x-llmgw-priority"] = priority
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt(words, salt)}]}
    start = time.monotonic()
    ttft: float | None = None
    with http.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as resp:
        for line in resp.iter_lines():
            if ttft is None and resp.status_code == 200 and line.startswith("data: {"):
                event = json.loads(line[6:])
                if any((c.get("delta") or {}).get("content") for c in event.get("choices") or ()):
                    ttft = time.monotonic() - start
        status = resp.status_code
        passed, queue_ms = resp.headers.get("x-llmgw-queue-passed"), resp.headers.get("x-llmgw-queue-ms")
    return Timed(start, ttft, time.monotonic(), status, None if passed is None else int(passed),
                 None if queue_ms is None else int(queue_ms))


REPO = Path(__file__).resolve().parents[2]


@contextmanager
def load(url: str, key: str, clients: int, *, priority: str | None = None, words: int = 200,
         max_tokens: int = 2, model: str = "m") -> Iterator[list[Timed]]:
    """`clients` closed loops in another process while the block runs; their requests after."""
    cmd = [sys.executable, "-m", "tests.support.tenant_load", url, key, "--clients", str(clients),
           "--prompt-words", str(words), "--max-tokens", str(max_tokens), "--model", model]
    if priority:
        cmd += ["--priority", priority]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdin is not None and proc.stdout is not None
    results: list[Timed] = []
    try:
        assert json.loads(proc.stdout.readline())["started"]
        yield results
    finally:
        proc.stdin.close()
        line = proc.stdout.readline()
        proc.stdout.close()
        proc.wait(60)
    results.extend(Timed(**r) for r in json.loads(line)["results"])


def queue_length(admin_url: str, group: str, priority: str = "interactive", model: str = "m") -> float:
    """The router's llmgw_admission_queue_length for one group and class."""
    text = httpx.get(admin_url + "/metrics", timeout=10).text
    want = f'llmgw_admission_queue_length{{group="{group}",model="{model}",priority="{priority}"}} '
    return next((float(line[len(want):]) for line in text.splitlines() if line.startswith(want)), 0.0)


def ttft_p50(ts: list[Timed]) -> float:
    return statistics.median(t.ttft for t in ts if t.ttft is not None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("key")
    ap.add_argument("--model", default="m")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--prompt-words", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=2)
    ap.add_argument("--priority")
    args = ap.parse_args()
    stop = threading.Event()
    results: list[Timed] = []
    lock = threading.Lock()

    def loop(n: int) -> None:
        with httpx.Client(timeout=120) as http:
            i = 0
            while not stop.is_set():
                i += 1
                t = one_request(http, args.url, args.key, model=args.model, words=args.prompt_words,
                                max_tokens=args.max_tokens, salt=f"c{n}r{i}", priority=args.priority)
                with lock:
                    results.append(t)

    threads = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(args.clients)]
    for t in threads:
        t.start()
    print(json.dumps({"started": time.monotonic()}), flush=True)
    sys.stdin.read()  # until the parent closes it
    stop.set()
    for t in threads:
        t.join(120)
    print(json.dumps({"results": [asdict(r) for r in results]}), flush=True)


if __name__ == "__main__":
    main()
