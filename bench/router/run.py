#!/usr/bin/env python3
"""What the router adds to a request: latency and throughput, against direct and LiteLLM.

    .venv/bin/python bench/router/run.py [--duration 8] [--rounds 2] [--connections 1,32] [--workers 1,2]

One command: it starts nginx as a near-zero-cost backend (a canned `chat.completion`
for POST /v1/chat/completions, and a canned SSE stream under /sse/), then drives
`wrk` (POST, JSON body, bearer key) at

    direct    nginx itself
    router    `llmgw router serve --workers 1` (the real CLI: one process, uvloop, auth,
              metrics, usage)
    router-wN the same with N workers (`--workers`, one per listed count above 1), on
              N cores: the workers axis (#17)
    litellm   LiteLLM proxy (one worker) on the same backend

for a plain completion and a stream, at each connection count, alternating targets,
`--rounds` times. The load generator and nginx are pinned to CPU 0 and the proxy to
CPU 1 with taskset, the same way for every target; a router with N workers gets CPUs
1..N, or every CPU when the machine has no N+1 (then it shares CPU 0 with the load
generator and nginx, and the printout says so). It prints p50/p99 latency and
requests/s per target, then the proxies' added latency (target minus direct) and the
ratios, and for the workers axis the throughput of N workers over one worker at the
highest connection count (goal: >= 1.7x for 2 workers on 2 free cores) with the CPU
each request cost the router and the load side (wrk + nginx: on a machine with no
spare core the router's workers share the cores with it, so the best N workers can
show is N / (1 + load side / router)); these machines are noisy, so compare ratios
from one run, and it prints the load average it ran under.

On a machine other people's work keeps busy, `--nice -10` (root) gives the benchmark's
processes a larger share of the CPUs for the run: with Linux's autogroups a nice value
only counts inside a session, so the benchmark runs itself in a session of its own and
sets the nice of that session's autogroup, which every process it starts stays in.

Exit status 1 when the router's p50 added latency is above a fifth of LiteLLM's.

Needs Debian `nginx` and `wrk` (installed with apt when missing and run as root)
and LiteLLM in its own virtualenv ($LLMGW_CACHE/bench-venv, created on first use;
never in the project's venv).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CACHE = Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache" / "llmgw"))
BENCH_VENV = CACHE / "bench-venv"
LOAD_CPU, PROXY_CPU = "0", "1"

COMPLETION = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "canned",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello! This is a canned completion."}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
}


def sse_stream() -> str:
    words = ["Hello", "!", " This", " is", " a", " canned", " stream", " of", " tokens", "."]
    events = []
    for i, w in enumerate(words):
        delta: dict[str, Any] = {"content": w}
        if i == 0:
            delta["role"] = "assistant"
        events.append({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                       "model": "canned", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    events.append({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                   "model": "canned", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                   "model": "canned", "choices": [],
                   "usage": {"prompt_tokens": 12, "completion_tokens": 10, "total_tokens": 22}})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None,
              headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"bench: process for {url} exited with {proc.returncode}")
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"bench: {url} did not answer within {timeout:.0f} s")


def wait_ready(url: str, workers: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Until the router's admin API says all its workers serve."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench: the router exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if json.load(r).get("workers", {}).get("ready") == workers:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"bench: {workers} router workers were not all serving within {timeout:.0f} s")


def ensure_tools(litellm_too: bool = True) -> None:
    missing = [p for p, b in (("nginx-light", "nginx"), ("wrk", "wrk")) if shutil.which(b) is None
               and not Path(f"/usr/sbin/{b}").exists()]
    if missing:
        if os.geteuid() != 0:
            raise SystemExit(f"bench: install {' '.join(missing)} (apt-get install {' '.join(missing)})")
        print(f"bench: installing {' '.join(missing)} with apt", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True,
                       env=env, stdout=subprocess.DEVNULL)
    litellm = BENCH_VENV / "bin" / "litellm"
    if litellm_too and not litellm.exists():
        print(f"bench: installing LiteLLM into {BENCH_VENV} (once; a few minutes)", flush=True)
        subprocess.run(["python3", "-m", "venv",
                        str(BENCH_VENV)], check=True)
        subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True)


def pinned(cpu: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *argv]


@contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        # A process group of its own (killed as one), in the benchmark's session: a new
        # session would be a new autogroup, out of reach of --nice.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, process_group=0)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def nginx_conf(work: Path, port: int) -> Path:
    (work / "sse").mkdir()
    (work / "sse" / "stream").write_text(sse_stream())
    body = json.dumps(COMPLETION).replace("\\", "\\\\").replace("'", "\\'")
    conf = work / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path {work}/body;
    server {{
        listen 127.0.0.1:{port} reuseport backlog=4096;
        root {work};
        location = /health {{ default_type application/json; return 200 '{{"status":"ok"}}'; }}
        location = /sse/health {{ default_type application/json; return 200 '{{"status":"ok"}}'; }}
        location = /v1/chat/completions {{ default_type application/json; return 200 '{body}'; }}
        location = /sse/stream {{ default_type text/event-stream; }}
        location = /sse/v1/chat/completions {{
            default_type text/event-stream;
            try_files /sse/stream =404;
            error_page 405 =200 $uri;
        }}
    }}
}}
""")
    return conf


def wrk_script(work: Path, key: str, model: str, stream: bool) -> Path:
    body = json.dumps({"model": model, "stream": stream, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Say hello."}]})
    path = work / f"wrk-{model}-{int(stream)}.lua"
    path.write_text(f"""
wrk.method = "POST"
wrk.body = {json.dumps(body)}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
done = function(summary, latency, requests)
  io.write(string.format('WRKJSON {{"requests": %d, "duration_us": %d, "errors": %d, "non2xx": %d, '
    .. '"p50": %d, "p90": %d, "p99": %d, "mean": %f}}\\n',
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean))
end
""")
    return path


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every process in a process group (the proxy and its workers)."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(url: str, script: Path, connections: int, seconds: float) -> dict[str, float]:
    argv = pinned(LOAD_CPU, ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s",
                             "-s", str(script), url])
    cpu0 = children_cpu_seconds()
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    wrk_cpu = children_cpu_seconds() - cpu0
    line = next((ln for ln in out.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        raise SystemExit(f"bench: wrk printed no summary:\n{out}")
    data: dict[str, float] = json.loads(line[len("WRKJSON "):])
    data["rps"] = data["requests"] / (data["duration_us"] / 1e6)
    data["wrk_cpu_s"] = wrk_cpu
    if data["non2xx"] or data["errors"]:
        print(f"  warning: {url}: {data['non2xx']:.0f} non-2xx, {data['errors']:.0f} socket errors", flush=True)
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=2, help="runs per target and case (alternating)")
    ap.add_argument("--connections", default="1,32", help="connection counts, comma-separated")
    ap.add_argument("--targets", default="direct,router,litellm")
    ap.add_argument("--workers", default="1,2", help="router worker counts (the workers axis), comma-separated")
    ap.add_argument("--nice", type=int, help="nice of the benchmark's autogroup, e.g. -10 on a busy shared "
                    "machine (root; see above)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs, configs)")
    ap.add_argument("--json", dest="json_out", type=Path, help="also write the raw results here")
    args = ap.parse_args()
    conns = [int(c) for c in args.connections.split(",")]
    workers = sorted({int(w) for w in args.workers.split(",")})
    targets = args.targets.split(",")
    if "router" in targets:
        targets += [f"router-w{w}" for w in workers if w > 1]
    ensure_tools("litellm" in targets)
    if args.nice is not None and os.getsid(0) != os.getpid():
        # A session (so an autogroup) of its own first: the nice of the caller's would
        # outlast the run and slow everything else started from that shell.
        return subprocess.run(["setsid", "--wait", sys.executable, *sys.argv], check=False).returncode
    if args.nice is not None:
        try:
            Path("/proc/self/autogroup").write_text(str(args.nice))
        except OSError as exc:
            raise SystemExit(f"bench: cannot set the autogroup nice to {args.nice} (needs Linux autogroups, "
                             f"and root below 0): {exc.strerror}") from None
    load_before = os.getloadavg()
    cpus = sorted(os.sched_getaffinity(0))

    from llmgw.state import ModelRecord, Replica, ScalingRecord, Shard, State, write_state
    from llmgw.store import open_store

    work = Path(tempfile.mkdtemp(prefix="llmgw-bench-"))
    work.chmod(0o755)  # nginx workers run as nobody when started by root
    nginx_port, litellm_port = free_port(), free_port()
    backend = f"http://127.0.0.1:{nginx_port}"

    scaling = ScalingRecord(min=1, max=1, idle_timeout=0)
    shard = Shard(node="localhost", rank=0, port=nginx_port, unit="nginx")
    write_state(work / "state.json", State(
        models=[ModelRecord(name="canned", scaling=scaling), ModelRecord(name="canned-sse", scaling=scaling)],
        replicas=[Replica(id="nginx", model="canned", profile="bench", engine="llamacpp", state="ready",
                          endpoint=backend, shards=[shard]),
                  Replica(id="nginx-sse", model="canned-sse", profile="bench", engine="llamacpp", state="ready",
                          endpoint=backend + "/sse", shards=[shard])]))
    store_url = f"sqlite:///{work}/store.sqlite"
    store = open_store(store_url)
    _, key = store.create_key("bench")
    store.close()
    litellm_key = "sk-bench-litellm"
    (work / "litellm.yaml").write_text(json.dumps({
        "model_list": [
            {"model_name": "canned", "litellm_params": {"model": "openai/canned", "api_base": backend + "/v1",
                                                        "api_key": "none"}},
            {"model_name": "canned-sse", "litellm_params": {"model": "openai/canned",
                                                            "api_base": backend + "/sse/v1", "api_key": "none"}}],
        "general_settings": {"master_key": litellm_key},
        "litellm_settings": {"telemetry": False, "set_verbose": False}}))

    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
           "NO_PROXY": "*", "PYTHONUNBUFFERED": "1"}
    venv_bin = Path(sys.executable).parent
    llmgw_bin = venv_bin / "llmgw"
    llmgw_argv = ([str(llmgw_bin)] if llmgw_bin.exists()
                  else [sys.executable, "-c", "from llmgw.cli import main; main()"])
    litellm_argv = [str(BENCH_VENV / "bin" / "litellm"), "--config", str(work / "litellm.yaml"),
                    "--host", "127.0.0.1", "--port", str(litellm_port), "--num_workers", "1"]

    print(f"bench: work dir {work}; nginx :{nginx_port}, litellm :{litellm_port}", flush=True)
    results: dict[tuple[str, str, int], list[dict[str, float]]] = defaultdict(list)
    with ExitStack() as stack:
        nginx = stack.enter_context(process(pinned(LOAD_CPU, ["nginx", "-c", str(nginx_conf(work, nginx_port))]),
                                            work / "nginx.log"))
        wait_http(backend + "/health", 10)
        pids: dict[str, int] = {}
        urls = {"direct": (backend, "canned", key)}
        for t in targets:
            if t == "router" or t.startswith("router-w"):
                n = 1 if t == "router" else int(t.removeprefix("router-w"))
                port, admin = free_port(), free_port()
                where = PROXY_CPU if n == 1 else (",".join(map(str, cpus[1:n + 1])) if len(cpus) > n
                                                  else ",".join(map(str, cpus)))
                if n > 1 and len(cpus) <= n:
                    print(f"bench: {t} runs on CPUs {where}, shared with the load generator and nginx "
                          f"(this machine has {len(cpus)}): its figures understate what {n} free cores give",
                          flush=True)
                argv = [*llmgw_argv, "router", "serve", "--state", str(work / "state.json"),
                        "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}", "--store", store_url,
                        "--log-level", "warning", "--workers", str(n)]
                proc = stack.enter_context(process(pinned(where, argv), work / f"{t}.log", env))
                wait_http(f"http://127.0.0.1:{admin}/health", 60, proc)
                if n > 1:  # every worker listening, not only the supervisor
                    wait_ready(f"http://127.0.0.1:{admin}/api/v1/status", n, proc)
                pids[t], urls[t] = proc.pid, (f"http://127.0.0.1:{port}", "canned", key)
            elif t == "litellm":
                proc = stack.enter_context(process(pinned(PROXY_CPU, litellm_argv), work / "litellm.log", env))
                wait_http(f"http://127.0.0.1:{litellm_port}/health/liveliness", 180, proc)
                pids[t], urls[t] = proc.pid, (f"http://127.0.0.1:{litellm_port}", "canned", litellm_key)
        cases = [("completion", False), ("stream", True)]
        for _case, stream in cases:
            for t in targets:  # warm each target once per case
                base, model, k = urls[t]
                prefix = "/sse" if (t == "direct" and stream) else ""
                m = model + ("-sse" if stream and t != "direct" else "")
                run_wrk(base + prefix + "/v1/chat/completions", wrk_script(work, k, m, stream), 4, 2)
        for rnd in range(args.rounds):
            for case, stream in cases:
                for c in conns:
                    for t in targets:
                        base, model, k = urls[t]
                        prefix = "/sse" if (t == "direct" and stream) else ""
                        m = model + ("-sse" if stream and t != "direct" else "")
                        pgid = pids.get(t)
                        cpu0 = group_cpu_seconds(pgid) if pgid else 0.0
                        nginx0 = group_cpu_seconds(nginx.pid)
                        r = run_wrk(base + prefix + "/v1/chat/completions", wrk_script(work, k, m, stream), c,
                                    args.duration)
                        n = max(1, r["requests"])
                        r["cpu_ms"] = (group_cpu_seconds(pgid) - cpu0) * 1000 / n if pgid else 0.0
                        r["load_cpu_ms"] = (group_cpu_seconds(nginx.pid) - nginx0 + r["wrk_cpu_s"]) * 1000 / n
                        results[(case, t, c)].append(r)
                        print(f"  round {rnd + 1} {case:10} c={c:<3} {t:8} p50 {r['p50'] / 1000:8.2f} ms  "
                              f"p99 {r['p99'] / 1000:8.2f} ms  {r['rps']:9.0f} req/s  "
                              f"{r['cpu_ms']:6.3f} CPU ms/req (load side {r['load_cpu_ms']:5.3f})", flush=True)

    ok = report(results, targets, conns)
    workers_axis(results, targets, max(conns), len(cpus))
    print(f"\nLoad average (1 min) at the start: {load_before[0]:.2f}, at the end: {os.getloadavg()[0]:.2f}"
          f"{f'; autogroup nice {args.nice}' if args.nice is not None else ''}")
    if args.json_out:
        args.json_out.write_text(json.dumps({f"{c}|{t}|{n}": v for (c, t, n), v in results.items()}, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def report(results: dict[tuple[str, str, int], list[dict[str, float]]], targets: list[str],
           conns: list[int]) -> bool:
    def med(case: str, t: str, c: int, f: str) -> float:
        return statistics.median(r[f] for r in results[(case, t, c)])

    ok = True
    print("\nResults (median of rounds; latency in ms; added = target minus direct at the same load)")
    for case in ("completion", "stream"):
        for c in conns:
            print(f"\n{case}, {c} connection{'s' if c != 1 else ''}:")
            print(f"  {'target':8} {'p50':>8} {'p99':>8} {'added p50':>10} {'added p99':>10} {'req/s':>9} "
                  f"{'vs direct':>10} {'CPU ms/req':>11}")
            d50, d99, drps = (med(case, "direct", c, "p50"), med(case, "direct", c, "p99"),
                              med(case, "direct", c, "rps")) if "direct" in targets else (0, 0, 0)
            added: dict[str, float] = {}
            for t in targets:
                p50, p99, rps = med(case, t, c, "p50"), med(case, t, c, "p99"), med(case, t, c, "rps")
                added[t] = (p50 - d50) / 1000
                cpu = med(case, t, c, "cpu_ms")
                print(f"  {t:8} {p50 / 1000:8.2f} {p99 / 1000:8.2f} {added[t]:10.2f} {(p99 - d99) / 1000:10.2f} "
                      f"{rps:9.0f} {rps / drps if drps else float('nan'):9.2f}x {cpu:11.3f}")
            if "router" in added and "litellm" in added and added["litellm"] > 0:
                ratio = added["router"] / added["litellm"]
                rr = med(case, "router", c, "rps") / med(case, "litellm", c, "rps")
                verdict = "ok" if ratio <= 0.2 else "ABOVE 1/5"
                print(f"  router added p50 / litellm added p50 = {ratio:.3f} ({verdict}); "
                      f"router throughput = {rr:.1f}x litellm")
                ok = ok and ratio <= 0.2
    return ok


def workers_axis(results: dict[tuple[str, str, int], list[dict[str, float]]], targets: list[str], c: int,
                 cpus: int) -> None:
    """Throughput of N workers over one, at the highest connection count (#17)."""
    routers = [t for t in targets if t == "router" or t.startswith("router-w")]
    if len(routers) < 2 or "router" not in routers:
        return
    print(f"\nWorkers axis ({c} connections; this machine: {cpus} CPUs; goal: 2 workers >= 1.7x one "
          "on 2 free cores):")
    print(f"  {'case':10} {'workers':>7} {'req/s':>9} {'vs 1 worker':>12} {'CPU ms/req':>11} {'load side':>10} "
          f"{'best N/(1+l/r)':>15}")
    for case in ("completion", "stream"):
        one = statistics.median(r["rps"] for r in results[(case, "router", c)])
        for t in routers:
            n = 1 if t == "router" else int(t.removeprefix("router-w"))
            rps = statistics.median(r["rps"] for r in results[(case, t, c)])
            cpu = statistics.median(r["cpu_ms"] for r in results[(case, t, c)])
            load = statistics.median(r["load_cpu_ms"] for r in results[(case, t, c)])
            # What N workers could show at best beside the load side on N cores (when the
            # machine has no spare core for it): N cores of work over router + load side.
            best = n / (1 + load / cpu) if n > 1 and cpus <= n and cpu > 0 else float(n)
            print(f"  {case:10} {n:7d} {rps:9.0f} {rps / one:11.2f}x {cpu:11.3f} {load:10.3f} {best:14.2f}x")


if __name__ == "__main__":
    sys.exit(main())
