"""How long reading a fleet's facts takes (llmgw.facts.cache.read_facts), 512 to 4,096 hosts.

    .venv/bin/python bench/facts_load.py [--sizes 512,1024,2048,4096] [--repeat 5]

Every plan and view (`llmgw plan`, `status`, `nodes`, `models`, the dashboard) starts by
reading the site's facts: one JSON file per host. The site is the one `bench/plan.py
--end-to-end --site issue` writes (8 H100s, a filesystem and 10 adapters per host, two
fabrics' ibnetdiscover text, ~28 MB at 4,096 hosts, in two hosts' facts). `cold s` is the
first read, which validates every file and writes the memo (llmgw.facts.memo); `warm s`
the best of --repeat reads after it, from the memo (no file changed: the everyday case),
each in a fresh process as a command runs it; `one changed s` a read after one host's
file changed (that file parsed again, the memo rewritten). CPU seconds, with the cyclic
collector as read_facts leaves it. Prints the growth from the smallest to the largest size
(8x the hosts; 8.0 is linear).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from plan import ISSUE_SHAPES, write_site  # bench/ is not a package: found on the path above

# One read in a fresh process: what a command pays (imports not counted).
READ = """
import sys, time
from pathlib import Path
from llmgw.facts import memo, use_memo
from llmgw.facts.cache import read_facts
use_memo(memo)  # as the CLI does on the bastion
t = time.process_time()
facts = read_facts(Path(sys.argv[1]))
print(time.process_time() - t, len(facts))
"""


def read(facts_dir: Path, cache: Path) -> float:
    out = subprocess.run([sys.executable, "-c", READ, str(facts_dir)], check=True, capture_output=True, text=True,
                         env={**os.environ, "LLMGW_CACHE": str(cache)}).stdout.split()
    return float(out[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="512,1024,2048,4096")
    ap.add_argument("--repeat", type=int, default=5, help="warm reads per size; the best counts")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'hosts':>6} {'facts MB':>8} {'memo MB':>7} {'cold s':>7} {'warm s':>7} {'warm s/1k hosts':>15} "
          f"{'one changed s':>13}")
    warm: dict[int, float] = {}
    for hosts in sizes:
        with tempfile.TemporaryDirectory(prefix="llmgw-bench-facts-") as tmp:
            root, cache = Path(tmp) / "site", Path(tmp) / "cache"
            write_site(root, hosts, ISSUE_SHAPES)
            facts_dir = root / "facts"
            cold = read(facts_dir, cache)
            warm[hosts] = min(read(facts_dir, cache) for _ in range(args.repeat))
            os.utime(facts_dir / sorted(p.name for p in facts_dir.glob("*.json"))[-1])
            changed = read(facts_dir, cache)
            size = sum(p.stat().st_size for p in facts_dir.glob("*.json")) / 1e6
            memo_mb = sum(p.stat().st_size for p in (cache / "inputs").glob("facts-*")) / 1e6
            print(f"{hosts:6d} {size:8.1f} {memo_mb:7.1f} {cold:7.2f} {warm[hosts]:7.3f} "
                  f"{warm[hosts] / hosts * 1000:15.3f} {changed:13.2f}", flush=True)
    lo, hi = sizes[0], sizes[-1]
    if hi > lo:
        print(f"growth {lo} -> {hi} hosts ({hi / lo:.0f}x): warm {warm[hi] / warm[lo]:.1f}x")


if __name__ == "__main__":
    main()
