#!/usr/bin/env python3
"""Fair sharing and priorities through the real router: the figures of issue #36, as ratios.

    .venv/bin/python bench/tenants/run.py [--replicas 2] [--light 1] [--heavy 8] [--requests 20]
                                          [--words 200] [--max-tokens 2] [--rounds 2] [--json]

Real llama-server replicas with the tiny model (one slot each), the real router in a
thread of this process (`max_in_flight=1` per replica), load from separate processes
(tests/support/tenant_load.py). Two groups of equal share: `light` with `--light`
clients, `heavy` with `--heavy` (8x). Phases, each `--requests` light requests:

- alone: only the light group;
- fair: the heavy group saturating the model, with admission (router queue, fair share);
- today: the same load with no router limit (`max_in_flight=1000`: every request goes
  straight to an engine and waits in its queue, as before admission);
- headroom: as fair, with `headroom_slots=1`: the last free slot goes only to a group
  holding none (the light group's next request finds it free; the heavy group keeps the
  other replica's);
- contention: the same heavy load on another model with as many replicas of its own, the
  light group alone on its model: no queue to wait in, only the machine's cores shared
  with busy engines and the load. Its ratio is what this machine does to TTFT whatever
  the router does; `fair` minus `contention` is the router's part;
- priority: one slot, a `batch` group keeping 6 requests outstanding, one interactive
  client: its wait in the router, and how many requests started while it waited.

`--rounds 2` runs fair/today as ABBA so a change in the machine's load falls on both.
Printed: the light group's TTFT p50 in each phase and its ratio to alone; the heavy
group's share of what was served meanwhile (not starved: about half or more); for
priority, the largest number of requests that started while an interactive one waited
(0: batch work never delayed it beyond the request it found running).

On a machine where the engines share CPU cores with each other and with the load, a
loaded engine is slower than an idle one whatever the router does: the ratio then
includes that; the router's own part is the wait it reports (x-llmgw-queue-ms).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from llmgw.router import RouterServer  # noqa: E402
from llmgw.store import Store, open_store  # noqa: E402
from tests.support.router import FAST, RunningRouter, StateFile, model, replica, serve_in_thread, start_engine  # noqa: E402
from tests.support.tenant_load import Timed, load, one_request, queue_length, ttft_p50  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402


def router(tmp: Path, state: StateFile, store: Store, max_in_flight: int, headroom: int = 0) -> RunningRouter:
    server = RouterServer(state_path=state.path, store=store, listen=("127.0.0.1", 0),
                          admin_listen=("127.0.0.1", 0), graceful_timeout=5,
                          settings=dataclasses.replace(FAST, max_in_flight=max_in_flight, headroom_slots=headroom))
    thread, errors = serve_in_thread(server)
    return RunningRouter(server, thread, store, errors)


def light(url: str, key: str, n: int, args: argparse.Namespace, tag: str) -> list[Timed]:
    with httpx.Client(timeout=120) as http:
        out = [one_request(http, url, key, model="m", words=args.words, max_tokens=args.max_tokens,
                           salt=f"{tag}{i}") for i in range(n)]
    bad = [t.status for t in out if t.status != 200]
    if bad:
        raise SystemExit(f"light requests failed: {bad}")
    return out


def loaded(rr: RunningRouter, keys: dict[str, str], args: argparse.Namespace, tag: str, *,
           admission: bool, heavy_model: str = "m") -> dict[str, Any]:
    with load(rr.base_url, keys["heavy"], args.heavy, words=args.words, max_tokens=args.max_tokens,
              model=heavy_model) as heavy:
        if admission:
            wait_until(lambda: queue_length(rr.admin_url, "heavy", model=heavy_model) >= 2, 60,
                       "heavy requests waiting")
        else:
            wait_until(lambda: sum(r["in_flight"] for r in rr.admin("/api/v1/replicas")["replicas"])
                       >= args.replicas + 2, 60, "heavy requests piling onto the engines")
        ts = light(rr.base_url, keys["light"], args.requests, args, tag)
    window = (ts[0].start, ts[-1].end)
    served = [h for h in heavy if h.status == 200 and window[0] <= h.start and h.end <= window[1]]
    return {"ttft_p50_ms": ttft_p50(ts) * 1000, "light_wait_p50_ms": statistics.median(t.queue_ms or 0 for t in ts),
            "light_engine_p50_ms": statistics.median((t.ttft or 0) * 1000 - (t.queue_ms or 0) for t in ts),
            "heavy_served": len(served), "light_served": len(ts),
            "light_passed_max": max(t.passed or 0 for t in ts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--light", type=int, default=1)
    ap.add_argument("--heavy", type=int, default=8)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--words", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.light != 1:
        raise SystemExit("--light is one client in this process (its requests are timed here)")
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-tenants-") as d:
        tmp = Path(d)
        engines = [start_engine(tmp, f"e{i}", parallel=1) for i in range(args.replicas)]
        # The same load on a model of its own (`h`, as many replicas): what the machine's shared
        # cores alone do to the light group's TTFT, with no queue of the light group's model.
        others = [start_engine(tmp, f"h{i}", parallel=1) for i in range(args.replicas)]
        state = StateFile(tmp / "state.json")
        state.write([model("m"), model("h")], [*(replica(f"r{i}", "m", e.endpoint) for i, e in enumerate(engines)),
                                               *(replica(f"h{i}", "h", e.endpoint) for i, e in enumerate(others))])
        store = open_store(f"sqlite://{tmp / 'store.sqlite'}")
        store.set_group("light", share=1.0)
        store.set_group("heavy", share=1.0)
        store.set_group("bulk", priority="batch")
        keys = {g: store.create_key(f"{g}-client", group=g)[1] for g in ("light", "heavy", "bulk")}
        routers = {"fair": router(tmp, state, store, 1), "today": router(tmp, state, store, 1000),
                   "headroom": router(tmp, state, store, 1, headroom=1)}
        try:
            light(routers["fair"].base_url, keys["light"], 3, args, "warm")
            alone = ttft_p50(light(routers["fair"].base_url, keys["light"], args.requests, args, "alone")) * 1000
            phases: dict[str, list[dict[str, Any]]] = {"fair": [], "today": [], "contention": [], "headroom": []}
            order = ["fair", "headroom", "contention", "today", "today", "contention", "headroom", "fair"] \
                if args.rounds >= 2 else ["fair", "headroom", "contention", "today"]
            for n, name in enumerate(order * max(1, args.rounds // 2)):
                phases[name].append(loaded(routers["fair" if name == "contention" else name], keys, args,
                                           f"{name}{n}", admission=name != "today",
                                           heavy_model="h" if name == "contention" else "m"))
            prio = priority(tmp, store, keys, args)
        finally:
            for rr in routers.values():
                rr.stop()
            for e in [*engines, *others]:
                e.kill()
            store.close()

    def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
        ttft = statistics.median(r["ttft_p50_ms"] for r in runs)
        heavy = sum(r["heavy_served"] for r in runs)
        total = heavy + sum(r["light_served"] for r in runs)
        return {"ttft_p50_ms": round(ttft, 1), "ratio_to_alone": round(ttft / alone, 2),
                "light_wait_in_router_p50_ms": statistics.median(r["light_wait_p50_ms"] for r in runs),
                "light_engine_p50_ms": round(statistics.median(r["light_engine_p50_ms"] for r in runs), 1),
                "light_passed_max": max(r["light_passed_max"] for r in runs),
                "heavy_share_of_served": round(heavy / total, 2) if total else None}

    out = {"alone_ttft_p50_ms": round(alone, 1), "fair": summary(phases["fair"]), "today": summary(phases["today"]),
           "contention": summary(phases["contention"]), "headroom": summary(phases["headroom"]),
           "priority": prio, "replicas": args.replicas, "heavy_clients": args.heavy}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    f, t, c, h = out["fair"], out["today"], out["contention"], out["headroom"]
    print(f"light TTFT p50 alone {alone:.1f} ms")
    print(f"  heavy x{args.heavy}, admission:    {f['ttft_p50_ms']:.1f} ms = {f['ratio_to_alone']:.2f}x alone "
          f"(router wait p50 {f['light_wait_in_router_p50_ms']} ms, at the engine {f['light_engine_p50_ms']} ms; "
          f"at most {f['light_passed_max']} started ahead; heavy served {f['heavy_share_of_served']:.0%} meanwhile)")
    print(f"  heavy x{args.heavy}, admission, headroom_slots=1: {h['ttft_p50_ms']:.1f} ms = {h['ratio_to_alone']:.2f}x "
          f"alone (router wait p50 {h['light_wait_in_router_p50_ms']} ms, at the engine {h['light_engine_p50_ms']} ms; "
          f"heavy served {h['heavy_share_of_served']:.0%} meanwhile)")
    print(f"  heavy x{args.heavy} on another model's replicas (the shared cores alone): {c['ttft_p50_ms']:.1f} ms "
          f"= {c['ratio_to_alone']:.2f}x alone (at the engine {c['light_engine_p50_ms']} ms)")
    print(f"  heavy x{args.heavy}, no admission: {t['ttft_p50_ms']:.1f} ms = {t['ratio_to_alone']:.2f}x alone "
          f"(heavy served {t['heavy_share_of_served']:.0%} meanwhile)")
    print(f"  admission / none: {f['ttft_p50_ms'] / t['ttft_p50_ms']:.2f}")
    print(f"priority, one slot, 6 batch outstanding: interactive router wait p50 {prio['interactive_wait_p50_ms']} ms "
          f"(batch {prio['batch_wait_p50_ms']} ms, ratio {prio['wait_ratio']}); at most "
          f"{prio['interactive_passed_max']} requests started while an interactive one waited")


def priority(tmp: Path, store: Store, keys: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    engine = start_engine(tmp, "p0", parallel=1)
    state = StateFile(tmp / "state-priority.json")
    state.write([model("m")], [replica("p0", "m", engine.endpoint)])
    rr = router(tmp, state, store, 1)
    try:
        with load(rr.base_url, keys["bulk"], 6, words=args.words, max_tokens=args.max_tokens) as bulk:
            wait_until(lambda: queue_length(rr.admin_url, "bulk", "batch") >= 3, 60, "batch requests waiting")
            ts = light(rr.base_url, keys["light"], args.requests, args, "prio")
        window = (ts[0].start, ts[-1].end)
        served = [b for b in bulk if b.status == 200 and window[0] <= b.start and b.end <= window[1]]
    finally:
        rr.stop()
        engine.kill()
    iw = statistics.median(t.queue_ms or 0 for t in ts)
    bw = statistics.median(b.queue_ms or 0 for b in served) if served else None
    return {"interactive_wait_p50_ms": iw, "batch_wait_p50_ms": bw,
            "wait_ratio": round(bw / iw, 1) if bw and iw else None,
            "interactive_passed_max": max(t.passed or 0 for t in ts), "batch_served": len(served)}


if __name__ == "__main__":
    main()
