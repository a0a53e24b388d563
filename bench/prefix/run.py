#!/usr/bin/env python3
"""Prefix-affinity against least-load: time to first token and throughput on shared prefixes.

    .venv/bin/python bench/prefix/run.py [--prefixes 18] [--prefix-words 400] [--sessions 72]
                                         [--turns 3] [--clients 3] [--max-tokens 16] [--slots 8]
                                         [--rounds 2] [--site DIR] [--json]

On the lab (a throwaway one of three hosts, brought up and torn down here, unless
--site names a running lab site), three replicas of a random-weight llama GGUF big
enough that prefill dominates (bench/prefix/model.py: 4 layers x 256, ~1,100 prompt
tokens of prefix take about a second to prefill on one of these cores, a cached one
under a fifth of that) serve model `prefix-bench` through the real router. Each
llama-server keeps the prompts of its `--slots` slots and nothing more (`--cache-ram 0`):
an engine whose cache holds fewer prefixes than the traffic has, so where a request lands
matters. The defaults size that: 18 prefixes over 3 replicas of 8 slots, so under
least-load every replica sees all 18 and can keep 8, while prefix-affinity's ring gives
each about a third of them (the bench prints how many: consistent hashing over a few keys
is uneven, e.g. 4/6/8), which its 8 slots hold; and 8 slots exceed the requests a
replica holds with 3 clients, so a request never waits in the engine for a slot (with 2
slots, in an early run, it did).

One run measures both policies side by side: two catalog models of the same weights and
engine settings, `prefix-bench-ll` (`routing: least-load`) and `prefix-bench-pa`
(`routing: prefix-affinity`), three replicas each, one of each on every host, made by
one apply; then a phase on each in turn (`--rounds 2` runs them ABBA, so a change in the
machine's load falls on both), the idle model's engines idle meanwhile. A phase is
`--sessions` conversations over `--prefixes` long system prompts (sessions spread evenly
over them), `--turns` turns each (a turn appends the answer and a new question), the
turns of all sessions interleaved at random (many users at once, not one conversation
after another: `schedule`), sent by `--clients` threads with the OpenAI SDK, streamed.
Both policies get the same requests in
the same order: a round's prompts and questions come from its seed alone (new prompts
each round, so no round starts on another's cache; the two models' engines are separate
processes, so neither starts on the other's). It prints per policy the requests, failures, the share
of prompt tokens the engines found cached, TTFT p50/p90 and throughput (requests/s),
and the ratios. Exit status 1 when a request failed or the goal (#16: prefix-affinity's
TTFT p50 at least 2x lower, throughput no lower) is not met. Timings on these shared
machines are noisy: compare the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import openai  # noqa: E402

from bench.prefix.model import make as make_model  # noqa: E402
from llmgw.apply import hosts_for  # noqa: E402
from llmgw.errors import LlmgwError  # noqa: E402
from llmgw.router.balance import Ring, prefix_key  # noqa: E402
from llmgw.site import Site  # noqa: E402
from llmgw.state import read_state  # noqa: E402
from tests.support.lab import VENV_BIN, Lab, lab  # noqa: E402

MODELS = {"least-load": "prefix-bench-ll", "prefix-affinity": "prefix-bench-pa"}
LAYERS, EMBD = 4, 256
# Word pieces the random model's vocabulary holds whole (scripts/make_tiny_gguf.py), so a
# prompt's length in tokens is predictable: about 2.8 tokens a word.
_WORDS = ("the of and to in is it you that he was for on are with as his they be at one have this from or had "
          "by hot word but what some we can out other were all there when up use your how said an each she which "
          "do their time if will way about many then them write would like so these her long make thing see him "
          "two has look more day could go come did number sound no most people my over know water than call "
          "first who may down side been now find")
WORDS = _WORDS.split()


def catalog(slots: int, ctx: int) -> str:
    out = ["models:"]
    for routing, name in MODELS.items():
        out.append(f"""\
  - name: {name}
    source: file:///srv/models/prefix-bench-{LAYERS}x{EMBD}.gguf
    scaling: {{min: 3, max: 3}}
    routing: {routing}
    profiles:
      - name: cpu
        engine: llamacpp
        gpus: 0
        min_memory_gb: 1
        args: ["--ctx-size", "{ctx}", "--parallel", "{slots}", "--cache-ram", "0", "--threads", "1"]""")
    return "\n".join(out) + "\n"


@dataclass
class Request:
    policy: str
    turn: int
    ttft: float | None
    seconds: float
    prompt_tokens: int
    cached_tokens: int
    error: str | None


@dataclass
class Phase:
    policy: str
    elapsed: float = 0.0
    done: list[Request] = field(default_factory=list)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def turn(api: openai.OpenAI, policy: str, messages: list[dict[str, str]], n: int, max_tokens: int) -> Request:
    """One streamed request of a conversation; its answer is appended to `messages` when it succeeds."""
    t0 = time.monotonic()
    ttft: float | None = None
    text: list[str] = []
    prompt = cached = 0
    error: str | None = None
    try:
        for chunk in api.chat.completions.create(model=MODELS[policy], messages=messages,  # type: ignore[call-overload]
                                                 max_tokens=max_tokens, stream=True,
                                                 stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content:
                if ttft is None:
                    ttft = time.monotonic() - t0
                text.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                prompt = chunk.usage.prompt_tokens
                details = chunk.usage.prompt_tokens_details
                cached = (details.cached_tokens or 0) if details is not None else 0
        if ttft is None:
            error = "the stream carried no content"
    except Exception as exc:  # every failure counts, whatever it is
        error = f"{type(exc).__name__}: {exc}"
    if error is None:
        messages.append({"role": "assistant", "content": "".join(text)})
    return Request(policy, n, ttft, time.monotonic() - t0, prompt, cached, error)


def schedule(rng: random.Random, sessions: int, turns: int) -> list[int]:
    """The order of the phase's requests, by session: every session's turns, in a random interleaving.

    Many users at once: the request after one turn of a conversation is usually another
    conversation's, over another system prompt, as the traffic of many sessions reaches a
    gateway. (Each client running one conversation to its end made least-load sticky: with
    every client's next request sent to the replica it had just left, the only one with a
    request fewer in flight, least-load kept each conversation on one replica, which no
    router can count on when users think between turns.)"""
    order = [sid for sid in range(sessions) for _ in range(turns)]
    rng.shuffle(order)  # a session's k-th place in the list is its turn k
    return order


def run_phase(base_url: str, key: str, policy: str, seed: int, args: argparse.Namespace) -> Phase:
    """One policy's phase; the same `seed` gives the same prompts, questions and order of requests."""
    rng = random.Random(seed)
    systems = [f"You are assistant {seed}-{k}. " + words(rng, args.prefix_words) for k in range(args.prefixes)]
    prompts = [systems[s % args.prefixes] for s in range(args.sessions)]
    rng.shuffle(prompts)  # sessions over one prompt are spread over the phase
    conversations: list[list[dict[str, str]]] = [[{"role": "system", "content": p}] for p in prompts]
    # A session's questions come from the seed and the session, not from whichever client sends them.
    questions = [random.Random(seed * 100_003 + s) for s in range(args.sessions)]
    order = schedule(rng, args.sessions, args.turns)
    phase = Phase(policy)
    cond = threading.Condition()
    nxt = [0]
    busy: set[int] = set()  # sessions with a turn in flight: the next turn waits for its answer
    failed: set[int] = set()  # sessions with a failed turn: their later turns are not sent

    def client(n: int) -> None:
        api = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600)
        try:
            while True:
                with cond:
                    if nxt[0] >= len(order):
                        return
                    sid = order[nxt[0]]
                    nxt[0] += 1
                    cond.wait_for(lambda s=sid: s not in busy)  # type: ignore[misc]
                    if sid in failed:
                        continue
                    busy.add(sid)
                    messages = conversations[sid]
                    n_turn = sum(1 for m in messages if m["role"] == "user")
                    messages.append({"role": "user",
                                     "content": f"session {sid} turn {n_turn}: {words(questions[sid], 12)}"})
                row = turn(api, policy, messages, n_turn, args.max_tokens)
                with cond:
                    phase.done.append(row)
                    if row.error:
                        failed.add(sid)
                    busy.discard(sid)
                    cond.notify_all()
        finally:
            api.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3600)
    phase.elapsed = time.monotonic() - t0
    return phase


def spread(state_replicas: list[str], seed: int, args: argparse.Namespace) -> list[int]:
    """Prefixes per prefix-affinity replica as the router's ring places them (first choice, no load)."""
    rng = random.Random(seed)
    systems = [f"You are assistant {seed}-{k}. " + words(rng, args.prefix_words) for k in range(args.prefixes)]
    ring = Ring(state_replicas)
    counts = dict.fromkeys(state_replicas, 0)
    for system in systems:
        k = prefix_key("POST /v1/chat/completions", {"messages": [{"role": "system", "content": system}]})
        if k is not None:
            counts[ring.order(k)[0]] += 1
    return sorted(counts.values())


def llmgw(site: Path, *args: str) -> None:
    done = subprocess.run([str(VENV_BIN / "llmgw"), "-C", str(site), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"llmgw {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def api_key(site: Path) -> str:
    """A key in the lab router's store (through Ansible, as `llmgw keys create` does)."""
    try:
        return str(hosts_for(Site.load(site)).create_key(f"bench-prefix-{int(time.time())}")["key"])
    except LlmgwError as exc:
        sys.exit(f"Error: cannot create an API key on the lab router: {exc.message}\n" + "\n".join(exc.detail))


def deploy(site: Path, args: argparse.Namespace) -> None:
    """Both models, one apply (apply waits until every router holds the new state)."""
    (site / "catalog" / "bench.yaml").write_text(catalog(args.slots, args.ctx))
    llmgw(site, "apply", "--auto-approve")
    models = {m.name: m for m in read_state(Site.load(site).state_file).models}
    for routing, name in MODELS.items():
        if models[name].routing != routing:
            sys.exit(f"the state says {name} routes by {models[name].routing} after apply, not {routing}")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(phases: list[Phase]) -> dict[str, Any]:
    rows = [r for p in phases for r in p.done]
    ttfts = [r.ttft for r in rows if r.ttft is not None and r.error is None]
    elapsed = sum(p.elapsed for p in phases)
    ok = [r for r in rows if r.error is None]
    prompt = sum(r.prompt_tokens for r in ok)
    return {"requests": len(rows), "failures": sum(1 for r in rows if r.error),
            "cached_share": round(sum(r.cached_tokens for r in ok) / prompt, 3) if prompt else None,
            "ttft_p50_ms": None if not ttfts else round(1000 * (pct(ttfts, 0.5) or 0)),
            "ttft_p90_ms": None if not ttfts else round(1000 * (pct(ttfts, 0.9) or 0)),
            "requests_per_s": round(len(ok) / elapsed, 3) if elapsed else None,
            "elapsed_s": round(elapsed, 1)}


def bench(site: Path, args: argparse.Namespace, own: bool) -> dict[str, Any]:
    path = make_model(LAYERS, EMBD)
    if own:  # a throwaway lab: the bench's model alone, nothing else taking CPU
        for other in (site / "catalog").glob("*.y*ml"):
            other.unlink()
    print(f"bench: model {path.name} ({path.stat().st_size // 2**20} MiB); facts and apply "
          "(two models of three replicas)", flush=True)
    llmgw(site, "facts")
    deploy(site, args)
    state = read_state(Site.load(site).state_file)
    hosts = sorted(f"{r.id}@{s.node}" for r in state.replicas if r.model in MODELS.values() for s in r.shards)
    key = api_key(site)
    base_url = Lab(site, "").router_url + "/v1"
    # Warm every replica (first-request costs) on a prompt no phase uses.
    for policy in MODELS:
        warm = run_phase(base_url, key, policy, 999, argparse.Namespace(
            **{**vars(args), "prefixes": 3, "prefix_words": 50, "sessions": 6, "turns": 1, "clients": 3}))
        if any(r.error for r in warm.done):
            sys.exit(f"warm-up failed: {sorted({r.error for r in warm.done if r.error})[:3]}")
    order = ["least-load", "prefix-affinity"]
    plan = [order[(i // 2 + i) % 2] if args.rounds > 1 else order[i % 2] for i in range(2 * args.rounds)]
    phases: dict[str, list[Phase]] = {"least-load": [], "prefix-affinity": []}
    for i, policy in enumerate(plan):
        phase = run_phase(base_url, key, policy, i // 2 + 1, args)  # round r: seed r for both policies
        phases[policy].append(phase)
        s = summary([phase])
        print(f"bench: phase {i + 1}/{len(plan)} {policy}: {s['requests']} requests in {s['elapsed_s']} s, "
              f"TTFT p50 {s['ttft_p50_ms']} ms, cached {s['cached_share']}", flush=True)
    pa_ids = sorted(r.id for r in state.replicas if r.model == MODELS["prefix-affinity"])
    out: dict[str, Any] = {"replicas_on": hosts, "prefixes": args.prefixes, "prefix_words": args.prefix_words,
                           "sessions": args.sessions, "turns": args.turns, "clients": args.clients,
                           "slots": args.slots, "rounds": args.rounds,
                           "ring_spread": [spread(pa_ids, r + 1, args) for r in range(args.rounds)]}
    for policy, ps in phases.items():
        out[policy] = summary(ps)
    ll, pa = out["least-load"], out["prefix-affinity"]
    out["ttft_p50_ratio"] = round(ll["ttft_p50_ms"] / pa["ttft_p50_ms"], 2) if pa["ttft_p50_ms"] else None
    out["ttft_p90_ratio"] = round(ll["ttft_p90_ms"] / pa["ttft_p90_ms"], 2) if pa["ttft_p90_ms"] else None
    out["throughput_ratio"] = (round(pa["requests_per_s"] / ll["requests_per_s"], 2)
                               if ll["requests_per_s"] else None)
    out["goal_met"] = bool(out["ttft_p50_ratio"] and out["ttft_p50_ratio"] >= 2
                           and out["throughput_ratio"] and out["throughput_ratio"] >= 1)
    out["errors"] = sorted({r.error for p in [*phases["least-load"], *phases["prefix-affinity"]]
                            for r in p.done if r.error})[:10]
    return out


def report(res: dict[str, Any]) -> None:
    print(f"\n{res['sessions']} sessions x {res['turns']} turns over {res['prefixes']} system prompts of "
          f"{res['prefix_words']} words, {res['clients']} clients, 3 replicas x {res['slots']} slots "
          f"(on {', '.join(res['replicas_on'])}), {res['rounds']} round(s); sessions' turns interleaved")
    print("prefixes per prefix-affinity replica on the ring, by round: "
          + "; ".join("/".join(map(str, s)) for s in res["ring_spread"]))
    print(f"{'':16} {'requests':>9} {'failures':>9} {'cached':>7} {'TTFT p50':>10} {'TTFT p90':>10} {'req/s':>7}")
    for name in ("least-load", "prefix-affinity"):
        r = res[name]
        cached = "-" if r["cached_share"] is None else f"{100 * r['cached_share']:.0f}%"
        print(f"{name:16} {r['requests']:>9} {r['failures']:>9} {cached:>7} {r['ttft_p50_ms']!s:>7} ms "
              f"{r['ttft_p90_ms']!s:>7} ms {r['requests_per_s']!s:>7}")
    print(f"least-load / prefix-affinity TTFT: p50 x{res['ttft_p50_ratio']}, p90 x{res['ttft_p90_ratio']}; "
          f"throughput prefix-affinity / least-load x{res['throughput_ratio']}")
    print(f"goal (TTFT p50 at least 2x lower, throughput no lower): {'met' if res['goal_met'] else 'not met'}")
    for e in res["errors"]:
        print(f"error: {e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefixes", type=int, default=18, help="distinct long system prompts per phase")
    ap.add_argument("--prefix-words", type=int, default=400, help="words per system prompt (~2.8 tokens each)")
    ap.add_argument("--sessions", type=int, default=72, help="conversations per phase")
    ap.add_argument("--turns", type=int, default=3, help="requests per conversation")
    ap.add_argument("--clients", type=int, default=3, help="requests at once")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--slots", type=int, default=8, help="llama-server --parallel: prompts each replica keeps")
    ap.add_argument("--ctx", type=int, help="llama-server --ctx-size, split between the slots (default: 3,072 "
                    "per slot)")
    ap.add_argument("--rounds", type=int, default=2, help="phases per policy (2: ABBA order)")
    ap.add_argument("--site", type=Path, help="a running lab's site (default: a throwaway lab of three hosts)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if min(args.prefixes, args.prefix_words, args.sessions, args.turns, args.clients, args.max_tokens, args.slots,
           args.rounds) < 1:
        sys.exit("Error: every count (--prefixes, --sessions, --turns, --clients, ...) must be at least 1")
    if args.ctx is None:
        args.ctx = 3072 * args.slots
    if args.ctx < 2048 * args.slots:
        sys.exit(f"Error: --ctx {args.ctx} leaves a slot under 2,048 tokens; a prompt of --prefix-words "
                 f"{args.prefix_words} and its turns needs about that: give --ctx {3072 * args.slots} or more")
    if args.site is not None:
        res = bench(args.site.resolve(), args, own=False)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="llmgw-bench-prefix-"))
        try:
            print("bench: bringing up a lab of three hosts (a few minutes)", flush=True)
            with lab(tmp, nodes=3, prefix="llmgw-bench") as it:
                res = bench(it.site, args, own=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        report(res)
    failed = res["least-load"]["failures"] + res["prefix-affinity"]["failures"]
    return 1 if failed or not res["goal_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
