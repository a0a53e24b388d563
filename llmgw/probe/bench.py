"""Load a model through the router and measure it: streamed chat completions, N at a time.

Per request: time to first token (TTFT: request sent -> first streamed content) and
inter-token latency (ITL: (last content - first content) / (output tokens - 1), the
decode time per token after the first). Over the run: their p50/p90 across the
requests that succeeded, output tokens per second (all output tokens / wall time) and
errors by kind. A warm-up request first (not counted) finds a wrong key, URL or model
before any load is sent.

Output length is fixed with `ignore_eos` (llama-server, vLLM and SGLang honour it), so
runs with the same settings compare; the prompt is `prompt_tokens` copies of one common
word, about one token each (the engine's own count is in the usage and the result).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from llmgw.errors import LlmgwError
from llmgw.probe.sse import SseChunks

PROMPT_WORD = " hello"


@dataclass(frozen=True)
class BenchSpec:
    concurrency: int
    requests: int | None  # stop after this many; or
    duration: float | None  # stop starting requests after this many seconds
    prompt_tokens: int
    max_tokens: int
    timeout: float = 300.0


@dataclass
class Sample:
    """One request's outcome."""

    ok: bool
    started: float
    ttft: float | None = None
    itl: float | None = None  # None with fewer than two output tokens
    output_tokens: int = 0
    prompt_tokens: int = 0
    latency: float = 0.0
    error: str | None = None
    fingerprint: str | None = None  # the engine's system_fingerprint (llama-server: its build)
    chunk_times: list[float] = field(default_factory=list, repr=False)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolated between the two nearest ranks."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def prompt_text(tokens: int) -> str:
    return (PROMPT_WORD * max(1, tokens)).strip()


def body(model: str, spec: BenchSpec, *, stream: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "max_tokens": spec.max_tokens, "temperature": 0, "ignore_eos": True,
                           "messages": [{"role": "user", "content": prompt_text(spec.prompt_tokens)}]}
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def error_text(status: int, raw: bytes) -> str:
    """`HTTP 503: message` with the OpenAI-shaped error's message, cut to one short line."""
    message = ""
    try:
        data = json.loads(raw)
        err = data.get("error") if isinstance(data, dict) else None
        message = str(err.get("message") if isinstance(err, dict) else err or "")
    except ValueError:
        message = raw.decode("utf-8", "replace")
    message = " ".join(message.split())[:160]
    return f"HTTP {status}" + (f": {message}" if message else "")


async def one_request(client: httpx.AsyncClient, url: str, key: str, payload: dict[str, Any],
                      timeout: float) -> Sample:
    started = time.perf_counter()
    sample = Sample(ok=False, started=started)
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=payload, timeout=timeout,
                                 headers={"Authorization": f"Bearer {key}"}) as resp:
            if resp.status_code != 200:
                sample.error = error_text(resp.status_code, await resp.aread())
                return sample
            chunks = SseChunks()
            async for line in resp.aiter_lines():
                chunk = chunks.feed(line)
                if chunks.done:
                    break
                if chunk is None:
                    continue
                sample.fingerprint = chunk.get("system_fingerprint") or sample.fingerprint
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content"):
                        sample.chunk_times.append(time.perf_counter())
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    sample.output_tokens = int(usage.get("completion_tokens") or 0)
                    sample.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            if not chunks.done:
                sample.error = "the stream ended without [DONE]"
                return sample
    except httpx.TimeoutException:
        sample.error = "timed out"
        return sample
    except httpx.HTTPError as exc:
        sample.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
        return sample
    except ValueError:
        sample.error = "a stream chunk is not JSON"
        return sample
    sample.latency = time.perf_counter() - started
    if not sample.chunk_times:
        sample.error = "no tokens streamed"
        return sample
    sample.output_tokens = sample.output_tokens or len(sample.chunk_times)
    sample.ttft = sample.chunk_times[0] - started
    if sample.output_tokens > 1:
        sample.itl = (sample.chunk_times[-1] - sample.chunk_times[0]) / (sample.output_tokens - 1)
    sample.ok = True
    return sample


async def warm_up(client: httpx.AsyncClient, url: str, key: str, model: str, spec: BenchSpec) -> str | None:
    """One small request before the load; an error that no load could get past is raised.
    Returns the engine's fingerprint."""
    small = BenchSpec(1, 1, None, min(spec.prompt_tokens, 8), 1, spec.timeout)
    try:
        resp = await client.post(url + "/v1/chat/completions", json=body(model, small, stream=False),
                                 headers={"Authorization": f"Bearer {key}"}, timeout=spec.timeout)
    except httpx.HTTPError as exc:
        raise LlmgwError(f"cannot reach the router at {url}: {type(exc).__name__}: {exc}",
                         hint="check --router-url / $LLMGW_ROUTER_URL and that the router runs") from None
    if resp.status_code in (401, 403):
        raise LlmgwError(f"the router at {url} refused the API key ({error_text(resp.status_code, resp.content)})",
                         hint="set $LLMGW_API_KEY (or --key-file) to a key of the routers' store")
    if resp.status_code == 404:
        raise LlmgwError(f"the router at {url} does not serve {model!r} "
                         f"({error_text(resp.status_code, resp.content)})",
                         hint="`llmgw models` shows what is served")
    if resp.status_code != 200:
        raise LlmgwError(f"the warm-up request failed: {error_text(resp.status_code, resp.content)}",
                         hint="`llmgw replicas` and `llmgw logs REPLICA` show the replicas")
    fp = resp.json().get("system_fingerprint") if resp.headers.get("content-type", "").startswith(
        "application/json") else None
    return str(fp) if fp else None


async def run_bench(url: str, key: str, model: str, spec: BenchSpec,
                    on_done: Callable[[Sample, float], None] | None = None) -> tuple[list[Sample], float, str | None]:
    """(samples, wall seconds of the load, the engine's fingerprint). `on_done(sample, elapsed)`
    is called as each request ends, for a progress bar."""
    limits = httpx.Limits(max_connections=spec.concurrency, max_keepalive_connections=spec.concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=spec.timeout) as client:
        fingerprint = await warm_up(client, url, key, model, spec)
        payload = body(model, spec)
        samples: list[Sample] = []
        started = time.perf_counter()
        deadline = started + spec.duration if spec.duration is not None else None
        issued = 0

        def more() -> bool:
            nonlocal issued
            if spec.requests is not None and issued >= spec.requests:
                return False
            if deadline is not None and time.perf_counter() >= deadline:
                return False
            issued += 1
            return True

        async def worker() -> None:
            while more():
                s = await one_request(client, url, key, payload, spec.timeout)
                samples.append(s)
                if on_done is not None:
                    on_done(s, time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        wall = time.perf_counter() - started
    fingerprint = next((s.fingerprint for s in samples if s.fingerprint), fingerprint)
    return samples, wall, fingerprint


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 2)


def summarize(samples: list[Sample], wall: float) -> dict[str, Any]:
    """The run's figures, JSON-ready (latencies in ms)."""
    ok = [s for s in samples if s.ok]
    ttfts = [s.ttft for s in ok if s.ttft is not None]
    itls = [s.itl for s in ok if s.itl is not None]
    out_tokens = sum(s.output_tokens for s in ok)
    errors = Counter(s.error or "failed" for s in samples if not s.ok)
    return {
        "requests": len(samples), "ok": len(ok), "errors": len(samples) - len(ok),
        "errors_by_kind": dict(errors.most_common()),
        "duration_s": round(wall, 3),
        "output_tokens": out_tokens,
        "output_tokens_per_s": round(out_tokens / wall, 2) if wall > 0 else 0.0,
        "mean_prompt_tokens": round(sum(s.prompt_tokens for s in ok) / len(ok), 1) if ok else None,
        "mean_output_tokens": round(out_tokens / len(ok), 1) if ok else None,
        "ttft_p50_ms": _ms(percentile(ttfts, 50)), "ttft_p90_ms": _ms(percentile(ttfts, 90)),
        "itl_p50_ms": _ms(percentile(itls, 50)), "itl_p90_ms": _ms(percentile(itls, 90)),
    }
