"""How long each dashboard page takes on a large site: 512 and 4,096 hosts.

    .venv/bin/python bench/dashboard_pages.py [--sizes 512,4096] [--repeat 3]

The site is bench/views.py's (bench/plan.py's fleet with the state its first plan leaves).
The dashboard runs in this process, as a router's admin listener mounts it
(`dashboard_router` over a `SiteDataCache`), asked through Starlette's test client. `load`
is the first request, which reads the site (the cache is cold); every page after it is
timed warm, as an operator clicking through sees it: the best of --repeat requests, wall
time (one request at a time, nothing else running in the process). The goal is 1 s per
page at 4,096 hosts. Pages render the same dicts the CLI views print (llmgw.views).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fastapi import FastAPI
from fastapi.testclient import TestClient
from views import applied_site  # type: ignore[import-not-found]

from llmgw.site import Site
from llmgw.views import Runtime
from llmgw.views.planned import site_copy_files
from llmgw.views.sitedata import SiteDataCache
from llmgw.web.dashboard import DashboardSources, dashboard_router, handed_in

GOAL_S = 1.0


def pages(client: TestClient) -> list[str]:
    """Every page, with the first node, model and fabric for the detail pages."""
    fabrics = client.get("/api/v1/fabrics").json()["fabrics"]
    first_fabric = fabrics[0]["id"] if fabrics else None
    return ["/", "/nodes", "/nodes/gpu-00001", "/models", "/models/m1x8-0", "/replicas", "/failures",
            "/fabrics", *([f"/fabrics/{first_fabric}", f"/api/v1/fabrics/{first_fabric}/topology"]
                          if first_fabric else [])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="512,4096")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'hosts':>6} {'page':<40} {'wall s':>7} {'KB':>7} {'goal x':>6}")
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-pages-") as tmp:
        os.environ["LLMGW_CACHE"] = str(Path(tmp) / "cache")
        for hosts in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"site-{hosts}"
            applied_site(root, hosts)
            t0 = time.perf_counter()  # what apply makes for a router's site copy (fabrics, placement, fleet)
            for name, data in site_copy_files(Site.load(root)).items():
                (root / name).write_bytes(data)
            print(f"{hosts:>6} {'(site copy files, at apply)':<40} {time.perf_counter() - t0:>7.2f}")
            app = FastAPI()
            app.include_router(dashboard_router(DashboardSources(
                site=SiteDataCache(root), runtime=handed_in(Runtime.unknown("not asked in a benchmark")))))
            client = TestClient(app)
            t0 = time.perf_counter()
            client.get("/").raise_for_status()
            print(f"{hosts:6d} {'load (first request, cold cache)':<40} {time.perf_counter() - t0:7.2f}", flush=True)
            for path in pages(client):
                best, size = float("inf"), 0
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    r = client.get(path)
                    best = min(best, time.perf_counter() - t0)
                    r.raise_for_status()
                    size = len(r.content)
                print(f"{hosts:6d} {path:<40} {best:7.2f} {size / 1024:7.0f} {best / GOAL_S:6.2f}", flush=True)


if __name__ == "__main__":
    main()
