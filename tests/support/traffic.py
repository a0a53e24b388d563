"""Client traffic through a lab's router, with the OpenAI SDK, that counts every failure.

- `Streams`: N threads streaming chat completions back to back until stopped, each request
  recorded (start, time to first token, error); tests/e2e/test_rollout_lab.py and
  bench/rollout/run.py both drive it.
- `Hammer`: one thread sending plain chat completions one after another (the apply, vLLM
  and two-host lab tests' client during a move).

Whatever goes wrong in a request counts as a failure: an exception of any kind, or a stream
that ended without a finish_reason.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import openai

# Two replicas of the lab's tiny model: the catalog the rollout test and bench move around.
TWO_TINY = """\
models:
  - name: tiny
    source: file:///srv/models/tiny.gguf
    scaling: {min: 2, max: 2}
    profiles:
      - name: cpu
        engine: llamacpp
        gpus: 0
        min_memory_gb: 1
        args: ["--ctx-size", "2048"]
"""


@dataclass
class Request:
    started: float  # monotonic
    ttft: float | None  # seconds to the first content token
    error: str | None


class Streams:
    """`clients` threads, each streaming `max_tokens`-token completions back to back until stopped."""

    def __init__(self, base_url: str, key: str, clients: int, *, max_tokens: int = 64, model: str = "tiny",
                 prompt: str = "hello") -> None:
        # A client waits as long as the router's first-byte deadline: a stream queued behind
        # others on a loaded machine is slow, not failed; only an error counts.
        self.apis = [openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600)
                     for _ in range(clients)]
        self.clients, self.max_tokens, self.model, self.prompt = clients, max_tokens, model, prompt
        self.done: list[Request] = []
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(api,), daemon=True) for api in self.apis]

    def _one(self, api: openai.OpenAI) -> Request:
        t0 = time.monotonic()
        ttft: float | None = None
        try:
            finished = False
            for chunk in api.chat.completions.create(model=self.model, max_tokens=self.max_tokens, stream=True,
                                                     messages=[{"role": "user", "content": self.prompt}]):
                if chunk.choices:
                    if ttft is None and chunk.choices[0].delta.content:
                        ttft = time.monotonic() - t0
                    finished = finished or chunk.choices[0].finish_reason is not None
            return Request(t0, ttft, None if finished else "the stream ended without a finish_reason")
        except Exception as exc:  # every failure counts, whatever it is
            return Request(t0, ttft, f"{type(exc).__name__}: {exc}")

    def _run(self, api: openai.OpenAI) -> None:
        while not self.stop.is_set():
            req = self._one(api)
            with self.lock:
                self.done.append(req)
                if req.error is None:
                    self.ok += 1
                else:
                    self.failures.append(req.error)

    def completed(self) -> int:
        """Requests finished, failed or not."""
        with self.lock:
            return len(self.done)

    def __enter__(self) -> Streams:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(660)
        for api in self.apis:
            api.close()

    def wait_for(self, n: int, timeout: float = 600) -> None:
        """Until `n` more streams have finished well (or one failed: the caller asserts on failures)."""
        deadline = time.monotonic() + timeout
        start = self.ok
        while self.ok < start + n and not self.failures:
            assert time.monotonic() < deadline, f"fewer than {n} streams finished in {timeout:g} s"
            time.sleep(0.1)  # polling the counter, with the deadline above


class Hammer(threading.Thread):
    """Sends chat completions to `model` one after another until stopped; counts what failed.

    `pause` seconds between requests (0: none) leave the engine idle part of the time: two
    vLLMs on the lab's two shared cores, one serving without pause, starve the other's start.
    """

    def __init__(self, api: openai.OpenAI, model: str, *, pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.api, self.model, self.pause = api, model, pause
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                r = self.api.chat.completions.create(model=self.model, max_tokens=4,
                                                     messages=[{"role": "user", "content": "hello"}])
                assert r.choices[0].message.content is not None
                self.ok += 1
            except Exception as exc:  # every failure counts, whatever it is
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self.stop.wait(self.pause)

    def wait_for(self, n: int, timeout: float = 60) -> None:
        """Until `n` more answers (or a failure, or the deadline: the caller asserts on what it saw)."""
        deadline, start = time.monotonic() + timeout, self.ok
        while self.ok < start + n and not self.failures and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the counter, with the deadline above
