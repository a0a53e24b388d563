"""A site repository for controller tests: no host is ever contacted.

The inventory's one node, n1, is never reached: the seeded replica on it is recorded as
applied, a catalog commit that only adds an on-demand model changes the routers' records
(no host), and the commit that removes the model also removes n1 from the inventory, so
destroying its replica stops no unit (apply leaves units on hosts gone from the inventory).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import State, WriteMeta
from llmgw.state.select import backend_for

OLD = """\
models:
  - name: old
    source: hf://org/old/old.gguf
    scaling: {min: 1}
    profiles:
      - name: cpu
        engine: llamacpp
"""
NEW = """\
models:
  - name: new
    source: hf://org/new/new.gguf
    scaling: {min: 0, max: 1}
    profiles:
      - name: cpu
        engine: llamacpp
"""
WITH_N1 = ("all:\n  children:\n    llmgw_nodes:\n      hosts:\n        n1:\n"
           "          ansible_host: 192.0.2.1\n")
EMPTY = "all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=tester", "-c", "user.email=t@example.invalid",
                           *args], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            git(repo, "rm", "-q", rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def site_repo(root: Path, state: str) -> Path:
    """The site's repository at its first commit: model `old` on n1."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"llmgw.yaml": f"inventory: hosts.yml\nstate: {state}\n", "hosts.yml": WITH_N1,
                  "catalog/old.yaml": OLD, ".gitignore": ".llmgw/\nfacts/\nstate.json*\n"}, "old on n1")
    return repo


def clone(repo: Path, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(repo), str(where)], check=True, capture_output=True, timeout=60)
    return where


def seed_applied(site_dir: Path, runtime: Path | None = None) -> State:
    """The state as if the first commit had been applied (replica old-1 ready on n1), where a
    controller with runtime folder `runtime` keeps it (a local state lives there)."""
    site = Site.load(site_dir, runtime=runtime)
    plan = make_plan(load_inputs(site))
    with backend_for(site) as backend:
        return backend.write(plan.applied(State(lineage="")), expect_serial=0, meta=WriteMeta("seed"))
