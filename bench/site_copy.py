"""What planning the routers' site copy adds to an apply: 512 and 4,096 hosts.

    .venv/bin/python bench/site_copy.py [--sizes 512,4096]

The router never plans (#34): apply plans what the dashboard shows as unplaceable and
summarises the fleet for the fleet gauges (#35) on the bastion, once per apply that
reconverges the routers (llmgw.views.planned.site_copy_files), and packs both into the
site copy. Measured on bench/plan.py's site with the state its first plan leaves: `cold`
with an empty memo (the first apply), `warm` with the memo the first left (every other).
Printed beside it: the plan itself (make_plan on loaded inputs), the part apply pays anyway.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from views import applied_site  # type: ignore[import-not-found]

from llmgw.facts import memo, use_memo
from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.views.planned import site_copy_files

use_memo(memo)  # as the CLI does on the bastion (apply builds the site copy)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn: object) -> tuple[float, float, object]:
    c, w = cpu(), time.perf_counter()
    out = fn()  # type: ignore[operator]
    return cpu() - c, time.perf_counter() - w, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="512,4096")
    args = ap.parse_args()
    print(f"{'hosts':>6} {'replicas':>8} {'what':<22} {'cpu s':>7} {'wall s':>7} {'KB':>7} {'x plan':>6}")
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-sitecopy-") as tmp:
        os.environ["LLMGW_CACHE"] = str(Path(tmp) / "cache")
        for hosts in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"site-{hosts}"
            replicas = applied_site(root, hosts)
            site = Site.load(root)
            inputs = load_inputs(site)
            plan_cpu, _w, _p = timed(lambda: make_plan(inputs))  # noqa: B023
            for label in ("site copy, cold memo", "site copy, warm memo"):
                if label.endswith("cold memo"):
                    for f in (Path(tmp) / "cache").rglob("*"):
                        if f.is_file():
                            f.unlink()
                c, w, files = timed(lambda: site_copy_files(Site.load(root)))  # noqa: B023
                size = sum(len(b) for b in files.values()) / 1024  # type: ignore[attr-defined]
                print(f"{hosts:>6} {replicas:>8} {label:<22} {c:>7.2f} {w:>7.2f} {size:>7.0f} {c / plan_cpu:>6.1f}")
            print(f"{hosts:>6} {replicas:>8} {'make_plan alone':<22} {plan_cpu:>7.2f}")


if __name__ == "__main__":
    main()
