"""How long validating a large catalog takes, and whether it stays linear.

    .venv/bin/python bench/catalog_validate.py [--models 10000] [--repeat 3]

Writes a site whose catalog holds N models in 10 files (every fourth model with two
aliases and a fallback, llama.cpp, vLLM and multi-node profiles, scaling with idle
timeouts), then times `load_catalog` (YAML, schema, lines, cross-file checks: what every
command pays) in-process, and `llmgw catalog validate --offline` end to end in a fresh
process (imports and the servability checks too). Sizes: a quarter, half and all of N;
it prints the best wall and CPU time of each, CPU per 1,000 models (flat when linear)
and the growth factor. On a shared machine, compare CPU time and the ratios.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from plan import compile_llmgw  # type: ignore[import-not-found]

from llmgw.catalog import load_catalog

FILES = 10


def model_yaml(i: int, total: int) -> str:
    name = f"model-{i:05d}"
    lines = [f"  - name: {name}", f"    source: hf://org-{i % 97}/repo-{i}/weights-q4_k_m.gguf"]
    if i % 4 == 0:
        lines.append(f"    aliases: [alias-{i:05d}-a, alias-{i:05d}-b]")
        lines.append(f"    fallbacks: [model-{(i + 1) % total:05d}]")
    lines.append(f"    scaling: {{min: {i % 3}, max: {i % 3 + 2}, idle_timeout: {10 + i % 50}m}}")
    lines += ["    profiles:",
              "      - name: cpu", "        engine: llamacpp", "        min_memory_gb: 16",
              "      - name: h100-tp2", "        engine: vllm", "        gpus: 2", "        gpu_class: H100-80GB"]
    if i % 10 == 0:
        lines += ["      - name: h100-2x8", "        engine: vllm", "        gpus: 8", "        nodes: 2",
                  "        gpu_class: H100-80GB", "        min_memory_gb: 256"]
    return "\n".join(lines) + "\n"


def write_site(root: Path, models: int) -> None:
    (root / "catalog").mkdir(parents=True)
    (root / "llmgw.yaml").write_text("")
    per = -(-models // FILES)
    for f in range(FILES):
        body = "".join(model_yaml(i, models) for i in range(f * per, min(models, (f + 1) * per)))
        (root / "catalog" / f"part-{f:02d}.yaml").write_text(f"# part {f}\nmodels:\n{body}")


def cli_validate(root: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    llmgw = str(Path(sys.executable).parent / "llmgw")
    # stderr: one note per model whose source was never inspected (offline, no facts)
    subprocess.run([llmgw, "-C", str(root), "catalog", "validate", "--offline"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the best counts")
    args = ap.parse_args()
    sizes = sorted({max(10, args.models // 4), max(10, args.models // 2), args.models})
    print(f"{'models':>7} {'load wall s':>11} {'cpu s':>6} {'cpu ms/1k':>9} {'validate wall s':>15} {'cpu s':>6}")
    cpus: dict[int, float] = {}
    compile_llmgw()  # `catalog validate` as installed: see bench/plan.py
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="llmgw-bench-catalog-") as tmp:
            root = Path(tmp) / "site"
            write_site(root, n)
            wall = cpu = float("inf")
            for _ in range(args.repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                cat = load_catalog(root / "catalog", root=root)
                wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
            assert len(cat) == n, len(cat)
            cpus[n] = cpu
            runs = [cli_validate(root) for _ in range(args.repeat)]
            print(f"{n:7d} {wall:11.2f} {cpu:6.2f} {cpu / n * 1e6:9.1f} {min(w for w, _ in runs):15.2f} "
                  f"{min(c for _, c in runs):6.2f}", flush=True)
    lo, hi = sizes[0], sizes[-1]
    print(f"growth {lo} -> {hi} models ({hi / lo:.0f}x): load CPU {cpus[hi] / cpus[lo]:.1f}x")


if __name__ == "__main__":
    main()
