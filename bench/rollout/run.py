#!/usr/bin/env python3
"""Rollouts under load: streaming clients through the router while apply moves replicas.

    .venv/bin/python bench/rollout/run.py [--clients 16] [--cycles 5] [--max-tokens 64]
                                          [--settle 15] [--site DIR] [--json]

On the lab (a throwaway one of three hosts, brought up and torn down here, unless
--site names a running lab site), `tiny` runs at `scaling: {min: 2}`. `--clients`
threads stream `--max-tokens`-token chat completions back to back through the router
with the OpenAI SDK, while apply performs `--cycles` rolling moves: drain the host of
one replica (alternating, so the router's own host takes part), apply, uncordon, apply,
then `--settle` seconds of steady traffic. It prints requests, failures and time to
first token (p50/p99) for requests started during a rollout (an apply that moved
something) and outside one, and each apply's duration.

Exit status 1 when any request failed. Timings on these shared machines are noisy:
compare the during/outside ratio of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from llmgw.apply import hosts_for  # noqa: E402
from llmgw.site import Site  # noqa: E402
from llmgw.state import read_state  # noqa: E402
from tests.support.lab import VENV_BIN, Lab, lab  # noqa: E402
from tests.support.traffic import TWO_TINY, Request, Streams  # noqa: E402


def llmgw(site: Path, *args: str) -> float:
    """Run the real CLI against the site; its duration in seconds (exit on failure)."""
    t0 = time.monotonic()
    done = subprocess.run([str(VENV_BIN / "llmgw"), "-C", str(site), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"llmgw {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return time.monotonic() - t0


def hosts_of(site: Path) -> list[str]:
    state = read_state(Site.load(site).state_file)
    return sorted(s.node for r in state.replicas for s in r.shards)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def wait_steady(load: Streams, seconds: float) -> None:
    """Traffic for `seconds`, and at least one finished stream per client."""
    start = load.completed()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or load.completed() < start + load.clients:
        time.sleep(0.2)


def bench(site: Path, args: argparse.Namespace) -> dict[str, Any]:
    (site / "catalog" / "tiny.yaml").write_text(TWO_TINY)
    print("bench: facts and the first apply (two replicas of tiny)", flush=True)
    llmgw(site, "facts")
    llmgw(site, "apply", "--auto-approve")
    before = hosts_of(site)
    key = hosts_for(Site.load(site)).create_key("bench-rollout")["key"]
    router = Lab(site, "").router_url + "/v1"
    windows: list[tuple[float, float]] = []
    cycles: list[dict[str, Any]] = []
    with Streams(router, key, args.clients, max_tokens=args.max_tokens, prompt="Tell me about the sea.") as load:
        wait_steady(load, args.settle)
        for i in range(args.cycles):
            hosts = hosts_of(site)
            node = hosts[i % len(hosts)]
            llmgw(site, "drain", node)
            t0 = time.monotonic()
            move = llmgw(site, "apply", "--auto-approve")
            windows.append((t0, time.monotonic()))
            after = hosts_of(site)
            llmgw(site, "uncordon", node)
            back = llmgw(site, "apply", "--auto-approve")
            cycles.append({"drained": node, "replicas_on": after, "move_apply_s": round(move, 1),
                           "uncordon_apply_s": round(back, 1)})
            print(f"bench: cycle {i + 1}/{args.cycles}: drained {node}, replicas now on {', '.join(after)}, "
                  f"apply {move:.1f} s; {load.completed()} streams so far", flush=True)
            wait_steady(load, args.settle)

    def during(r: Request) -> bool:
        return any(a <= r.started <= b for a, b in windows)

    out: dict[str, Any] = {"clients": args.clients, "cycles": cycles, "replicas_before": before}
    for name, rows in (("during", [r for r in load.done if during(r)]),
                       ("outside", [r for r in load.done if not during(r)])):
        ttfts = [r.ttft for r in rows if r.ttft is not None and r.error is None]
        out[name] = {"requests": len(rows), "failures": sum(1 for r in rows if r.error),
                     "ttft_p50_ms": None if not ttfts else round(1000 * (pct(ttfts, 0.5) or 0)),
                     "ttft_p99_ms": None if not ttfts else round(1000 * (pct(ttfts, 0.99) or 0))}
    out["errors"] = sorted({r.error for r in load.done if r.error})[:10]
    return out


def report(res: dict[str, Any]) -> None:
    print(f"\n{res['clients']} streaming clients, {len(res['cycles'])} move cycles "
          f"(replicas first on {', '.join(res['replicas_before'])})")
    print(f"{'':10} {'requests':>9} {'failures':>9} {'TTFT p50':>10} {'TTFT p99':>10}")
    for name in ("during", "outside"):
        r = res[name]

        def ms(v: int | None) -> str:
            return "-" if v is None else f"{v} ms"
        print(f"{name:10} {r['requests']:>9} {r['failures']:>9} {ms(r['ttft_p50_ms']):>10} {ms(r['ttft_p99_ms']):>10}")
    d, o = res["during"], res["outside"]
    if d["ttft_p50_ms"] and o["ttft_p50_ms"]:
        print(f"TTFT during/outside: p50 x{d['ttft_p50_ms'] / o['ttft_p50_ms']:.2f}, "
              f"p99 x{(d['ttft_p99_ms'] or 0) / max(o['ttft_p99_ms'] or 1, 1):.2f}")
    moves = [c["move_apply_s"] for c in res["cycles"]]
    if moves:
        print(f"move applies: {', '.join(f'{m:g} s' for m in moves)}")
    for e in res["errors"]:
        print(f"error: {e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--settle", type=float, default=15.0, help="seconds of steady traffic between cycles")
    ap.add_argument("--site", type=Path, help="a running lab's site (default: a throwaway lab of three hosts)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if args.clients < 1 or args.cycles < 0:
        sys.exit("Error: --clients must be at least 1 and --cycles at least 0")
    if args.site is not None:
        res = bench(args.site.resolve(), args)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="llmgw-bench-rollout-"))
        try:
            print("bench: bringing up a lab of three hosts (a few minutes)", flush=True)
            with lab(tmp, nodes=3, prefix="llmgw-bench") as it:
                res = bench(it.site, args)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        report(res)
    failed = res["during"]["failures"] + res["outside"]["failures"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
