"""What the dashboard costs a router: its memory, its first page, and the client listener meanwhile.

    .venv/bin/python bench/router_dashboard.py [--sizes 1024] [--pages 3] [--code DIR]

A real `llmgw router serve` (one worker) over bench/views.py's site with the files apply
ships in a router's site copy. Per size it prints:

- the router's RSS before any page, and after `--pages` rounds of the heaviest pages (MB);
  with the dashboard in its own process (llmgw.router.dashboard_child), that process's too;
- the first page's wall time (the dashboard process's start and the site's load) and a
  warm `/replicas`;
- the client listener's `/health` latency, p50 and max of back-to-back requests, alone and
  while those pages render: the ratio is what a page costs the requests clients send.

`--code DIR` runs the router from another checkout (PYTHONPATH=DIR), e.g. a `git worktree`
of the commit before the dashboard moved out, for an A/B on the same machine and site.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from router.run import free_port, wait_http  # type: ignore[import-not-found]
from views import applied_site  # type: ignore[import-not-found]

from llmgw.site import Site
from llmgw.views.planned import site_copy_files

HEAVY = ("/", "/nodes", "/replicas", "/fabrics")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def get(url: str, timeout: float = 300) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        r.read()
    return time.perf_counter() - t0


def health_latency(client: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        out.append(get(client + "/health", 30))


def run(root: Path, code: Path | None, pages: int) -> None:
    client_port, admin_port = free_port(), free_port()
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    # The CLI's own entry point, from whichever checkout PYTHONPATH puts first.
    proc = subprocess.Popen([sys.executable, "-c", "from llmgw.cli import main; main()", "-C", str(root), "router",
                             "serve",
                             "--listen", f"127.0.0.1:{client_port}", "--admin-listen", f"127.0.0.1:{admin_port}",
                             "--store", f"sqlite:///{root / 'store.sqlite'}", "--workers", "1",
                             "--health-interval", "3600", "--log-level", "warning"], env=env,
                            cwd=code)  # `-c` puts the working folder first on sys.path
    client, admin = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{admin_port}"
    try:
        wait_http(client + "/health", 120, proc)
        wait_http(admin + "/health", 60, proc)
        alone: list[float] = []
        stop = threading.Event()
        t = threading.Thread(target=health_latency, args=(client, stop, alone))
        t.start()
        time.sleep(3)  # a fixed window of the client path alone, to compare with the pages' window
        stop.set()
        t.join()
        before = rss_mb(proc.pid)
        first = get(admin + "/")
        during: list[float] = []
        stop = threading.Event()
        t = threading.Thread(target=health_latency, args=(client, stop, during))
        t.start()
        for _ in range(pages):
            for path in HEAVY:
                get(admin + path)
        stop.set()
        t.join()
        warm = min(get(admin + "/replicas") for _ in range(3))
        after = rss_mb(proc.pid)
        kids = sum(rss_mb(c) for c in children(proc.pid))
        p50 = [statistics.median(x) * 1000 for x in (alone, during)]
        worst = [max(x) * 1000 for x in (alone, during)]
        print(f"  router RSS {before:.0f} MB before any page, {after:.0f} MB after; dashboard process {kids:.0f} MB")
        print(f"  first page {first:.2f} s, warm /replicas {warm:.2f} s")
        print(f"  client /health p50 {p50[0]:.2f} -> {p50[1]:.2f} ms ({p50[1] / p50[0]:.2f}x), "
              f"max {worst[0]:.1f} -> {worst[1]:.1f} ms ({worst[1] / worst[0]:.2f}x) "
              f"over {len(alone)} / {len(during)} requests, alone / during the pages")
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1024")
    ap.add_argument("--pages", type=int, default=3, help="rounds of the heavy pages while /health is timed")
    ap.add_argument("--code", type=Path, help="run the router from this checkout (PYTHONPATH)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-router-dashboard-") as tmp:
        os.environ["LLMGW_CACHE"] = str(Path(tmp) / "cache")
        for hosts in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"site-{hosts}"
            applied_site(root, hosts)
            for name, data in site_copy_files(Site.load(root)).items():
                (root / name).write_bytes(data)
            print(f"{hosts} hosts{f', router from {args.code}' if args.code else ''}:")
            run(root, args.code, args.pages)


if __name__ == "__main__":
    main()
