"""How long the views take as the fleet grows: `status`, `nodes` and `models` at 512 to 4,096 hosts.

    .venv/bin/python bench/views.py [--sizes 512,4096] [--repeat 2]

The site is bench/plan.py's (hosts of 8 x H100 with 10 rail adapters, two fabrics, 20
models filling about 80% of the GPUs), with the state its first plan leaves once applied
(about 1,250 replicas per 512 hosts), so every view has replicas, models and fabrics to
show. Each command runs as a user runs it (`llmgw -C SITE ... --json`, no router asked:
`--no-router` where the command has it), in a fresh process; its CPU time (the process
and its children) is reported: `cold` is the first run (no memo of parsed facts and
fabrics, see llmgw.facts.memo), `warm` the best of --repeat runs after it. The goal is
1 s per view at 4,096 hosts; the last lines print the growth from the smallest size to
the largest (8x the hosts; 8.0 is linear). The memo lives in a temporary
$LLMGW_CACHE, so the bench neither reads nor leaves one of yours.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from plan import compile_llmgw, write_site  # type: ignore[import-not-found]

from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.yamlio import atomic_write

VIEWS = (("status", ["status", "--no-router", "--json"]), ("nodes", ["nodes", "--json"]),
         ("models", ["models", "--no-router", "--json"]))
GOAL_S = 1.0


def run(root: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall and CPU seconds (the process and its children) of one command, and its output's size."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    llmgw = str(Path(sys.executable).parent / "llmgw")
    out = subprocess.run([llmgw, "-C", str(root), *args], check=True, capture_output=True, env=env).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), len(out)


def applied_site(root: Path, hosts: int) -> int:
    """bench/plan.py's site with the state its first plan leaves; the number of replicas."""
    write_site(root, hosts)
    site = Site.load(root)
    inputs = load_inputs(site)
    state = make_plan(inputs).applied(inputs.state)
    atomic_write(site.state_file, state.to_json())
    return len(state.replicas)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="512,4096")
    ap.add_argument("--repeat", type=int, default=2, help="warm runs per view; the best counts")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    warm: dict[tuple[str, int], float] = {}
    print(f"{'hosts':>6} {'replicas':>8} {'view':>7} {'cold cpu s':>10} {'warm cpu s':>10} {'warm wall s':>11} "
          f"{'KB out':>7} {'goal x':>6}")
    compile_llmgw()  # as installed: see bench/plan.py
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-views-") as tmp:
        env = {**os.environ, "LLMGW_CACHE": str(Path(tmp) / "cache")}
        os.environ["LLMGW_CACHE"] = env["LLMGW_CACHE"]  # the in-process plan too
        for hosts in sizes:
            root = Path(tmp) / f"site-{hosts}"
            replicas = applied_site(root, hosts)
            for name, cmd in VIEWS:
                _, cold, _ = run(root, cmd, env)
                runs = [run(root, cmd, env) for _ in range(args.repeat)]
                wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
                warm[(name, hosts)] = cpu
                print(f"{hosts:6d} {replicas:8d} {name:>7} {cold:10.2f} {cpu:10.2f} {wall:11.2f} "
                      f"{runs[0][2] / 1024:7.0f} {cpu / GOAL_S:6.2f}", flush=True)
    lo, hi = sizes[0], sizes[-1]
    if hi > lo:
        for name, _ in VIEWS:
            print(f"growth {lo} -> {hi} hosts ({hi / lo:.0f}x), {name}: warm CPU "
                  f"{warm[(name, hi)] / warm[(name, lo)]:.1f}x")


if __name__ == "__main__":
    main()
