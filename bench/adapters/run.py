#!/usr/bin/env python3
"""Many LoRA adapters on shared replicas against one replica per adapter (issue #37).

    .venv/bin/python bench/adapters/run.py [--adapters 4] [--replicas 2] [--requests 48]
                                           [--clients 4] [--words 60] [--max-tokens 8]
                                           [--hot 0] [--rounds 2] [--json]

Real llama-server processes with the tiny model (scripts/make_tiny_gguf.py) and `--adapters`
tiny GGUF LoRAs (scripts/make_tiny_lora_gguf.py, one seed each), the real router in a thread
of this process, the requests streamed over HTTP by `--clients` threads. Two layouts:

- shared: `--replicas` replicas, each loading every adapter (`--lora a0,a1,...`): the router
  sends any adapter's request to any of them, asking for the adapter by id (docs/adapters.md);
- dedicated: one replica per adapter, each loading only its own, so an adapter's requests
  have exactly one replica. That is `--adapters` replicas: the same count as shared when
  `--adapters` equals `--replicas`, more otherwise (what serving each fine-tune as a whole
  model costs today; printed).

Every engine runs `--threads 1`; on a CPU-only machine the engines of either layout share
the same cores, so "the same GPU count" is the same cores here, and the dedicated layout's
extra replicas buy it no compute, only an engine per adapter. Each phase sends `--requests`
requests, each to one adapter: uniformly at random, or with `--hot F` a share F of them to
adapter 0 and the rest spread (a popular fine-tune: where a dedicated replica queues while
the others idle). The same seed gives both layouts the same sequence. `--rounds 2` runs the
layouts ABBA, so a change in the machine's load falls on both.

Printed per layout: replicas, requests, failures, throughput (requests/s) and TTFT p50/p90,
then shared/dedicated ratios (throughput: higher is better for shared; TTFT: lower).
Timings on a shared machine are noisy: compare the ratios of one run, not absolute figures.
On demand only: never run by the tests (tests/bench/test_adapters_bench.py checks the
argument checks and the summary arithmetic).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from llmgw.probe.bench import percentile  # noqa: E402

LAYOUTS = ("shared", "dedicated")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapters", type=int, default=4, help="N: adapters of the one base model")
    ap.add_argument("--replicas", type=int, default=2, help="M: replicas of the shared layout")
    ap.add_argument("--requests", type=int, default=48, help="requests per phase")
    ap.add_argument("--clients", type=int, default=4, help="threads sending requests at once")
    ap.add_argument("--words", type=int, default=60, help="words of each prompt")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=2, help="llama-server slots per replica")
    ap.add_argument("--hot", type=float, default=0.0, help="share of requests for adapter 0 (0: uniform)")
    ap.add_argument("--rounds", type=int, default=2, help="1: each layout once; 2: ABBA")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for name in ("adapters", "replicas", "requests", "clients", "words", "max_tokens", "parallel", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if not 0.0 <= args.hot < 1.0:
        ap.error(f"--hot is a share of the requests, from 0 up to (not including) 1, not {args.hot}")
    if args.hot and args.adapters < 2:
        ap.error("--hot needs at least 2 adapters (a hot one and the rest)")
    return args


def adapter_names(n: int) -> list[str]:
    return [f"tiny-lora-{i}" for i in range(n)]


def sequence(n_adapters: int, requests: int, hot: float, seed: int) -> list[int]:
    """Which adapter each request of a phase asks for: the same for both layouts of a round."""
    rng = random.Random(seed)
    if not hot:
        return [rng.randrange(n_adapters) for _ in range(requests)]
    return [0 if rng.random() < hot else rng.randrange(1, n_adapters) for _ in range(requests)]


def summarize(ttfts: list[float | None], elapsed: float) -> dict[str, Any]:
    """One phase: `ttfts` one per request (None: it failed), over `elapsed` seconds of wall time."""
    ok = [t for t in ttfts if t is not None]
    p50, p90 = percentile(ok, 50), percentile(ok, 90)
    return {"requests": len(ttfts), "failed": len(ttfts) - len(ok),
            "throughput_rps": round(len(ok) / elapsed, 2) if elapsed > 0 else None,
            "ttft_p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "ttft_p90_ms": None if p90 is None else round(p90 * 1000, 1)}


def combine(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """A layout over its rounds: counts summed, rates and latencies the median of the rounds'."""
    def med(key: str) -> float | None:
        vals = [p[key] for p in phases if p[key] is not None]
        return round(statistics.median(vals), 2) if vals else None
    return {"requests": sum(p["requests"] for p in phases), "failed": sum(p["failed"] for p in phases),
            "throughput_rps": med("throughput_rps"), "ttft_p50_ms": med("ttft_p50_ms"),
            "ttft_p90_ms": med("ttft_p90_ms")}


def ratios(shared: dict[str, Any], dedicated: dict[str, Any]) -> dict[str, float | None]:
    """shared / dedicated, for each figure both have."""
    out: dict[str, float | None] = {}
    for key in ("throughput_rps", "ttft_p50_ms", "ttft_p90_ms"):
        a, b = shared[key], dedicated[key]
        out[key] = round(a / b, 2) if a is not None and b else None
    return out


def phase(url: str, key: str, names: list[str], order: list[int], args: argparse.Namespace, tag: str) -> dict[str, Any]:
    import httpx

    from tests.support.tenant_load import one_request
    todo = list(enumerate(order))
    ttfts: list[float | None] = [None] * len(order)
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(timeout=120) as http:
            while True:
                with lock:
                    if not todo:
                        return
                    i, a = todo.pop(0)
                t = one_request(http, url, key, model=names[a], words=args.words, max_tokens=args.max_tokens,
                                salt=f"{tag}-{i}")
                ttfts[i] = t.ttft if t.status == 200 else None

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return summarize(ttfts, time.monotonic() - t0)


def main() -> None:
    args = parse()
    from llmgw.router import RouterServer
    from llmgw.state import AdapterRecord, LoadedAdapter
    from llmgw.store import open_store
    from tests.support.router import FAST, RunningRouter, StateFile, model, replica, serve_in_thread, start_engine

    names = adapter_names(args.adapters)
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-adapters-") as d:
        tmp = Path(d)
        paths = []
        for i in range(args.adapters):
            p = tmp / f"lora-{i}.gguf"
            subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_lora_gguf.py"), str(p),
                            "--seed", str(i + 1)], check=True, capture_output=True)
            paths.append(p)
        base = model("tiny").model_copy(update={"adapters": [AdapterRecord(name=n) for n in names]})
        engines, routers = [], {}
        store = open_store(f"sqlite://{tmp / 'store.sqlite'}")
        _, key = store.create_key("bench-adapters")
        try:
            layouts: dict[str, list[tuple[list[int], Any]]] = {"shared": [], "dedicated": []}
            for i in range(args.replicas):
                e = start_engine(tmp, f"s{i}", parallel=args.parallel, extra=("--lora", ",".join(map(str, paths))))
                engines.append(e)
                layouts["shared"].append((list(range(args.adapters)), e))
            for i in range(args.adapters):
                e = start_engine(tmp, f"d{i}", parallel=args.parallel, extra=("--lora", str(paths[i])))
                engines.append(e)
                layouts["dedicated"].append(([i], e))
            for layout, reps in layouts.items():
                state = StateFile(tmp / f"state-{layout}.json")
                state.write([base], [replica(f"{layout}-{j}", "tiny", e.endpoint).model_copy(
                    update={"adapters": [LoadedAdapter(name=names[a]) for a in loaded]})
                    for j, (loaded, e) in enumerate(reps)])
                server = RouterServer(state_path=state.path, store=store, listen=("127.0.0.1", 0),
                                      admin_listen=("127.0.0.1", 0), graceful_timeout=5, settings=FAST)
                thread, errors = serve_in_thread(server)
                routers[layout] = RunningRouter(server, thread, store, errors)
            for layout in LAYOUTS:  # warm each engine's adapters once, timed by neither layout
                phase(routers[layout].base_url, key, names, list(range(args.adapters)) * 2, args, f"warm-{layout}")
            order = ["shared", "dedicated", "dedicated", "shared"] if args.rounds >= 2 else list(LAYOUTS)
            results: dict[str, list[dict[str, Any]]] = {"shared": [], "dedicated": []}
            for n, layout in enumerate(order * max(1, args.rounds // 2)):
                seq = sequence(args.adapters, args.requests, args.hot, args.seed + n // 2)
                results[layout].append(phase(routers[layout].base_url, key, names, seq, args, f"{layout}{n}"))
        finally:
            for rr in routers.values():
                rr.stop()
            for e in engines:
                e.kill()
            store.close()

    out = {layout: {"replicas": len(layouts[layout]), **combine(results[layout])} for layout in LAYOUTS}
    out["ratio_shared_to_dedicated"] = ratios(out["shared"], out["dedicated"])
    out["settings"] = {k: getattr(args, k) for k in ("adapters", "replicas", "requests", "clients", "words",
                                                      "max_tokens", "parallel", "hot", "rounds")}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(report(out))
    if out["shared"]["failed"] or out["dedicated"]["failed"]:
        raise SystemExit(1)


def report(out: dict[str, Any]) -> str:
    s = out["settings"]
    spread = f"{s['hot']:.0%} to one adapter" if s["hot"] else "uniformly"
    lines = [f"{s['adapters']} adapters, {s['requests']} requests a phase spread {spread}, {s['clients']} clients, "
             f"{s['rounds']} round(s)"]
    for layout in LAYOUTS:
        r = out[layout]
        lines.append(f"  {layout:9} {r['replicas']} replicas: {r['requests']} requests, {r['failed']} failed, "
                     f"{r['throughput_rps']} req/s, TTFT p50 {r['ttft_p50_ms']} ms p90 {r['ttft_p90_ms']} ms")
    q = out["ratio_shared_to_dedicated"]
    lines.append(f"  shared/dedicated: throughput {q['throughput_rps']}x, TTFT p50 {q['ttft_p50_ms']}x, "
                 f"p90 {q['ttft_p90_ms']}x")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
