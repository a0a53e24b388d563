#!/usr/bin/env python3
"""How long `llmgw apply` takes on the lab: a first apply, a no-change apply, a rolling move.

    .venv/bin/python bench/apply_lab.py [--code DIR ...] [--mitogen] [--rounds N] [--site DIR] [--json]

On a throwaway lab of three hosts (brought up and torn down here, unless --site names a
running lab site), for each --code checkout in turn (default: this one), the real CLI of
that checkout (PYTHONPATH=DIR) runs, one after another:

- `first`: apply of the lab's tiny llama.cpp model onto a fleet with nothing on it (the
  router role runs in full: a new checkout is a new wheelhouse, a new virtualenv);
- `no-change`: apply again (the plan is empty);
- `move`: drain the replica's host, apply (a rolling move: start, deliver, drain, stop);
- `remove`: uncordon, empty the catalog, apply (what leaves the fleet empty for the next).

It prints each duration in seconds, and the CPU each step cost: on the control host (llmgw and
every Ansible process it started) and on the lab's hosts (their containers' cgroups), which
a busy machine inflates far less than the wall time. Give two checkouts (`--code OLD --code
NEW`) to compare them on the same lab, in that order; `--mitogen` runs each checkout a second
time with Mitogen's strategy for Ansible (`pip install mitogen` first), #33's "measure an
accelerator against it"; `--rounds N` repeats the whole sequence (ABAB...) and prints medians.
These machines are shared: compare figures of one run. `--runs` also prints, for each step,
every Ansible run apply made (its playbook and seconds) and the time between them, from
apply's own trace (llmgw.apply.hosts.TRACE_ENV): where a rolling move's seconds go.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmgw.apply.hosts import TRACE_ENV  # noqa: E402
from llmgw.site import Site  # noqa: E402
from llmgw.state import read_state  # noqa: E402
from tests.support.lab import TINY, VENV_BIN, lab, shape  # noqa: E402


class Meter:
    """Wall, control-host CPU and lab hosts' CPU of the commands run through it."""

    def __init__(self, code: Path, lab_name: str | None, env: dict[str, str], show_runs: bool = False) -> None:
        self.code, self.lab_name, self.show_runs = code, lab_name, show_runs
        self.env = {**os.environ, **env, "PYTHONPATH": str(code),
                    "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

    def hosts_cpu(self) -> float | None:
        """CPU seconds the lab's containers have used, from their cgroups (v1 or v2); None if unknown."""
        if self.lab_name is None:
            return None
        names = subprocess.run(["podman", "ps", "--filter", f"name=^{self.lab_name}-node", "--format",
                                "{{.Names}}"], capture_output=True, text=True, check=False).stdout.split()
        total = 0.0
        for name in names:
            path = subprocess.run(["podman", "inspect", name, "--format", "{{.State.CgroupPath}}"],
                                  capture_output=True, text=True, check=False).stdout.strip()
            v1, v2 = Path(f"/sys/fs/cgroup/cpuacct{path}/cpuacct.usage"), Path(f"/sys/fs/cgroup{path}/cpu.stat")
            if v1.is_file():
                total += int(v1.read_text()) / 1e9
            elif v2.is_file():
                usage = dict(line.split() for line in v2.read_text().splitlines())
                total += int(usage["usage_usec"]) / 1e6
            else:
                return None
        return total if names else None

    def run(self, site: Path, *args: str) -> dict[str, float]:
        """Run `llmgw ARGS` against the site; its wall, control CPU and hosts' CPU (exit on failure)."""
        before, hosts0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), self.hosts_cpu(), time.monotonic()
        trace = Path(tempfile.mkstemp(prefix="llmgw-apply-trace-")[1]) if self.show_runs else None
        env = {**self.env, TRACE_ENV: str(trace)} if trace is not None else self.env
        done = subprocess.run([str(VENV_BIN / "llmgw"), "-C", str(site), *args], capture_output=True, text=True,
                              check=False, env=env)
        if trace is not None:
            print(f"  llmgw {' '.join(args)}: {runs_of(trace)}", flush=True)
            trace.unlink()
        wall, after, hosts1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN), self.hosts_cpu()
        if done.returncode != 0:
            sys.exit(f"llmgw {' '.join(args)} ({self.code}) failed:\n{done.stdout}\n{done.stderr}")
        out = {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
        if hosts0 is not None and hosts1 is not None:
            out["hosts_cpu"] = hosts1 - hosts0
        return out


def runs_of(trace: Path) -> str:
    """The Ansible runs of one command, from its trace: `playbook (step) seconds`, and the gaps."""
    parts: list[str] = []
    last: float | None = None
    begun = 0.0
    for line in trace.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            continue  # a task's start
        mark, step, playbook, at = line.split("\t")
        if mark == "#run":
            if last is not None:
                parts.append(f"+{float(at) - last:.1f}")
            begun = float(at)
        elif mark == "#end":
            parts.append(f"{playbook} ({step}) {float(at) - begun:.1f}")
            last = float(at)
    return ", ".join(parts) or "no Ansible run"


def one(meter: Meter, site: Path) -> dict[str, dict[str, float]]:
    (site / "catalog" / "tiny.yaml").write_text(TINY)
    out = {"first": meter.run(site, "apply", "--auto-approve"), "no-change": meter.run(site, "apply", "--auto-approve")}
    [rep] = read_state(Site.load(site).state_file).replicas
    meter.run(site, "drain", rep.shards[0].node)
    out["move"] = meter.run(site, "apply", "--auto-approve")
    meter.run(site, "uncordon", rep.shards[0].node)
    (site / "catalog" / "tiny.yaml").unlink()
    out["remove"] = meter.run(site, "apply", "--auto-approve")
    return out


def mitogen_env() -> dict[str, str]:
    """Ansible's settings for Mitogen's strategy (exit when Mitogen is not installed)."""
    try:
        import ansible_mitogen  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("--mitogen: Mitogen is not installed (`.venv/bin/pip install mitogen`)")
    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def medians(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {step: {k: round(statistics.median(r[step][k] for r in rounds), 1) for k in rounds[0][step]}
            for step in rounds[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", type=Path, help="a checkout of llmgw to time (repeatable)")
    ap.add_argument("--mitogen", action="store_true", help="also time each checkout with Mitogen's strategy")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the sequence, alternating variants (medians)")
    ap.add_argument("--site", type=Path, help="a running lab's site (default: a lab of its own)")
    ap.add_argument("--lab-name", help="the running lab's name, for its hosts' CPU (with --site)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--runs", action="store_true", help="print every Ansible run of each step, with its seconds")
    args = ap.parse_args()
    variants: dict[str, tuple[Path, dict[str, str]]] = {}
    for code in (c.resolve() for c in (args.code or [REPO])):
        variants[str(code)] = (code, {})
        if args.mitogen:
            variants[f"{code} (mitogen)"] = (code, mitogen_env())
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in variants}

    def sequence(site: Path, lab_name: str | None) -> None:
        for _ in range(args.rounds):
            for name, (code, env) in variants.items():
                runs[name].append(one(Meter(code, lab_name, env, args.runs), site))
                print(name, json.dumps(runs[name][-1], default=lambda v: round(v, 1)), flush=True)

    if args.site is not None:
        sequence(args.site, args.lab_name)
    else:
        with tempfile.TemporaryDirectory(prefix="llmgw-bench-apply-") as tmp, \
                lab(Path(tmp), prefix="llmgw-bench") as it:
            shape(it, catalog={})
            sequence(it.site, it.name)
    results = {name: medians(rs) for name, rs in runs.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, steps in results.items():
        print(f"{name}: " + "; ".join(f"{step} " + ", ".join(f"{k} {v} s" for k, v in fig.items())
                                      for step, fig in steps.items()))
    if len(results) > 1:
        base, *others = results
        for other in others:
            print(f"{other} / {base}: " + "; ".join(
                f"{step} " + ", ".join(f"{k} x{results[other][step][k] / fig[k]:.2f}" for k in fig if fig[k])
                for step, fig in results[base].items()))


if __name__ == "__main__":
    main()
