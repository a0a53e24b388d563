#!/usr/bin/env python3
"""How long `llmgw apply` takes on the lab: a first apply, a no-change apply, a rolling move.

    .venv/bin/python bench/apply_lab.py [--code DIR ...] [--site DIR] [--json]

On a throwaway lab of three hosts (brought up and torn down here, unless --site names a
running lab site), for each --code checkout in turn (default: this one), the real CLI of
that checkout (PYTHONPATH=DIR) runs, one after another:

- `first`: apply of the lab's tiny llama.cpp model onto a fleet with nothing on it (the
  router role runs in full: a new checkout is a new wheelhouse, a new virtualenv);
- `no-change`: apply again (the plan is empty);
- `move`: drain the replica's host, apply (a rolling move: start, deliver, drain, stop);
- `remove`: uncordon, empty the catalog, apply (what leaves the fleet empty for the next).

It prints each duration in seconds. Give two checkouts (`--code OLD --code NEW`) to compare
them on the same lab, in that order. These machines are shared: compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmgw.site import Site  # noqa: E402
from llmgw.state import read_state  # noqa: E402
from tests.support.lab import TINY, VENV_BIN, lab, shape  # noqa: E402


def llmgw(code: Path, site: Path, *args: str) -> float:
    """Run `llmgw ARGS` of the checkout `code` against the site; its duration (exit on failure)."""
    env = {**os.environ, "PYTHONPATH": str(code), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    t0 = time.monotonic()
    done = subprocess.run([str(VENV_BIN / "llmgw"), "-C", str(site), *args], capture_output=True, text=True,
                          check=False, env=env)
    if done.returncode != 0:
        sys.exit(f"llmgw {' '.join(args)} ({code}) failed:\n{done.stdout}\n{done.stderr}")
    return time.monotonic() - t0


def one(code: Path, site: Path) -> dict[str, float]:
    (site / "catalog" / "tiny.yaml").write_text(TINY)
    out = {"first": llmgw(code, site, "apply", "--auto-approve"),
           "no-change": llmgw(code, site, "apply", "--auto-approve")}
    [rep] = read_state(Site.load(site).state_file).replicas
    llmgw(code, site, "drain", rep.shards[0].node)
    out["move"] = llmgw(code, site, "apply", "--auto-approve")
    llmgw(code, site, "uncordon", rep.shards[0].node)
    (site / "catalog" / "tiny.yaml").unlink()
    out["remove"] = llmgw(code, site, "apply", "--auto-approve")
    return {k: round(v, 1) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", type=Path, help="a checkout of llmgw to time (repeatable)")
    ap.add_argument("--site", type=Path, help="a running lab's site (default: a lab of its own)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    codes = [c.resolve() for c in (args.code or [REPO])]
    results: dict[str, dict[str, float]] = {}
    if args.site is not None:
        for code in codes:
            results[str(code)] = one(code, args.site)
    else:
        with tempfile.TemporaryDirectory(prefix="llmgw-bench-apply-") as tmp, \
                lab(Path(tmp), prefix="llmgw-bench") as it:
            shape(it, catalog={})
            for code in codes:
                results[str(code)] = one(code, it.site)
                print(code, results[str(code)], flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for code, figures in results.items():
            print(f"{code}: " + ", ".join(f"{k} {v} s" for k, v in figures.items()))



if __name__ == "__main__":
    main()
