"""What Ansible costs on the control host per host, for the kinds of runs apply makes.

    .venv/bin/python bench/apply_scale.py [--hosts 16,64,256] [--forks 20,50] [--tasks 40]

Many inventory hosts with `ansible_connection: local` stand in for a fleet: every module
runs on this machine, so what is measured is Ansible's own cost per host and task (the
control process forking workers, templating, shipping the module, collecting events
through ansible-runner), not any host's work. Two runs, both through llmgw.runner (so with
llmgw's forks, pipelining and event handling):

- `facts`: the real `playbooks/facts.yml` (the node, GPU and InfiniBand fact modules are
  read-only), as `llmgw facts` runs it;
- `engine`: a play shaped like the engine role's work on a changed host: --tasks tasks
  (files written into a per-host temp folder, stat, command, set_fact, and skipped tasks
  in the proportion the role skips them).

It prints CPU seconds (this process and its children: `resource.getrusage`, which a
machine shared with other jobs does not inflate the way it inflates wall time), CPU per
host and per host-task, and the growth between the smallest and largest host count.
The README's apply-at-scale figures are projected from these numbers.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from llmgw import ansible_content
from llmgw.runner import run_playbook


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def inventory(root: Path, hosts: int) -> Path:
    lines = ["all:", "  vars:", "    ansible_connection: local", f"    ansible_python_interpreter: {sys.executable}",
             "  children:", "    llmgw_nodes:", "      hosts:"]
    lines += [f"        bench-{i:05d}:" for i in range(hosts)]
    path = root / f"hosts-{hosts}.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def engine_play(root: Path, tasks: int) -> Path:
    """About the engine role's mix on a changed host: a third skipped, files, checks, commands."""
    body = []
    kinds = ["skip", "copy", "stat", "skip", "command", "set_fact"]
    for t in range(tasks):
        kind = kinds[t % len(kinds)]
        name = f"      - name: Step {t} ({kind})"
        if kind == "copy":
            body += [name, "        ansible.builtin.copy:",
                     "          dest: \"{{ bench_dir }}/{{ inventory_hostname }}-" + str(t) + ".conf\"",
                     "          content: \"shard {{ inventory_hostname }} " + str(t) + "\\n\"",
                     "          mode: '0600'"]
        elif kind == "stat":
            body += [name, "        ansible.builtin.stat:", "          path: \"{{ bench_dir }}\""]
        elif kind == "command":
            body += [name, "        ansible.builtin.command: \"true\"", "        changed_when: false"]
        elif kind == "set_fact":
            body += [name, "        ansible.builtin.set_fact:",
                     f"          bench_step_{t}: \"{{{{ inventory_hostname }}}}\""]
        else:
            body += [name, "        ansible.builtin.command: \"false\"", "        when: bench_never | default(false)"]
    play = ["---", "- name: Engine-like work", "  hosts: llmgw_nodes", "  gather_facts: false", "  strategy: free",
            "  tasks:", "    - name: Steps", "      block:", *body]
    path = root / "engine.yml"
    path.write_text("\n".join(play) + "\n")
    return path


def run(name: str, playbook: Path, inv: Path, hosts: int, forks: int, tasks: int, extra: dict[str, str]) -> float:
    c0, t0 = cpu(), time.perf_counter()
    result = run_playbook(playbook, inv, forks=forks, extravars=extra)
    wall, used = time.perf_counter() - t0, cpu() - c0
    failed = {h: e for h, e in result.host_errors.items()}
    if failed:
        raise SystemExit(f"{name}: {len(failed)} hosts failed, e.g. {next(iter(failed.items()))}")
    print(f"{name:7s} {hosts:6d} {forks:6d} {tasks:6d} {wall:8.1f} {used:8.1f} {used / hosts * 1000:12.0f} "
          f"{used / hosts / tasks * 1000:14.1f}", flush=True)
    return used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hosts", default="16,64,256")
    ap.add_argument("--forks", default="20,50")
    ap.add_argument("--tasks", type=int, default=40, help="tasks in the engine-like play")
    ap.add_argument("--only", choices=["facts", "engine"], help="run one of the two")
    args = ap.parse_args()
    sizes = [int(s) for s in args.hosts.split(",")]
    forks_list = [int(f) for f in args.forks.split(",")]
    print(f"{'run':7s} {'hosts':>6} {'forks':>6} {'tasks':>6} {'wall s':>8} {'cpu s':>8} {'cpu ms/host':>12} "
          f"{'cpu ms/host-task':>14}")
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-apply-") as tmp:
        root = Path(tmp)
        (root / "out").mkdir()
        engine = engine_play(root, args.tasks)
        facts = ansible_content.playbook("facts.yml")
        for forks in forks_list:
            per: dict[str, dict[int, float]] = {"facts": {}, "engine": {}}
            for hosts in sizes:
                inv = inventory(root, hosts)
                if args.only in (None, "facts"):
                    per["facts"][hosts] = run("facts", facts, inv, hosts, forks, 3,
                                              {"llmgw_facts_targets": "llmgw_nodes"})
                if args.only in (None, "engine"):
                    per["engine"][hosts] = run("engine", engine, inv, hosts, forks, args.tasks,
                                               {"bench_dir": str(root / "out")})
            lo, hi = sizes[0], sizes[-1]
            for name, got in per.items():
                if hi > lo and got:
                    slope = (got[hi] - got[lo]) / (hi - lo)
                    print(f"{name}, forks {forks}: {lo} -> {hi} hosts ({hi / lo:.0f}x): CPU {got[hi] / got[lo]:.1f}x; "
                          f"{slope * 1000:.0f} ms CPU per added host, {got[lo] - slope * lo:.1f} s fixed")


if __name__ == "__main__":
    main()
