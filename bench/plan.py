"""How long planning takes as the fleet grows: 512 to 4,096 hosts of 8 GPUs, filled to about 80%.

    .venv/bin/python bench/plan.py [--sizes 512,1024,2048,4096] [--repeat 3] [--fabric map|real]

The fleet: hosts of 8 x H100-80GB with 4 rail adapters each on one InfiniBand fabric,
rail-optimised in scalable units of 20 hosts (one leaf per unit and rail); about 1% of
hosts have a degraded cable and 0.5% an unhealthy GPU; a few hosts already hold each
model's weights. The catalog: 20 models whose `scaling.min` asks for about 80% of the
GPUs, in five shapes (2 nodes x 8 GPUs, 8, 4, 2 and 1 GPU), 10/20/20/15/15% of the fleet.

It times a first plan (everything to create) and a re-plan against the state that plan
leaves (nothing to change, the everyday case), the best of --repeat runs, and prints a
table so the growth is visible: time per 1,000 hosts stays flat when planning is linear.
`--fabric real` builds the fabric index by parsing generated ibnetdiscover text with
llmgw.fabric (slower to set up; the plan itself is what is timed).

`--end-to-end` times the whole `llmgw plan --out plan.json` command instead, as a user
runs it, on a site written to a temporary folder: a YAML inventory, one facts file per
host (8 rail adapters), two fabrics (an 8-rail compute fabric and a 2-rail second one,
their ibnetdiscover text in two hosts' facts), the catalog as YAML, an empty state.
It runs the command in a fresh process (imports, inventory, facts, fabrics, state,
catalog, placement, rendering, writing the JSON) and reports wall and CPU time (the
command's and its children's): `cold cpu s` is the first run, which parses the inventory, every
facts file and fabric and fills the memo (llmgw.facts.memo, in the temporary folder); `cpu s`
the best of --repeat runs after it, which read them from the memo (the everyday case:
facts change between plans far less often than plans are made), checked byte-identical
to the cold plan; `goal x` is that over the 1 s goal; and the growth factor from the
smallest to the largest size (8x the hosts; 8.0 is linear). `--profile` prints where
the largest size's time goes (cProfile, in-process). `--site issue` plans the site issue #17
measured instead (about 1,500 whole-node and two-node replicas at 4,096 hosts, where the default
catalog asks for about 10,000, many of 1 and 2 GPUs); `--site both` prints both tables.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from llmgw.catalog import Model
from llmgw.catalog.load import Catalog, Located
from llmgw.facts.records import Filesystem, Gpu, HostFacts, Weights
from llmgw.inventory import Host
from llmgw.planner import FabricIndex, MapFabrics, Plan, PlanInputs, make_plan
from llmgw.site import PortRange
from llmgw.state import State
from llmgw.weights.names import cache_name

GPUS = 8
RAILS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
HOSTS_PER_SU = 20
SHAPES = [(2, 8, 0.10), (1, 8, 0.20), (1, 4, 0.20), (1, 2, 0.15), (1, 1, 0.15)]  # nodes, gpus, share
# `--site issue`: the site issue #17 measured ("about 1,500 replicas" at 4,096 hosts): whole-node
# and two-node replicas only, 55% of the GPUs (1,436 replicas at 4,096 hosts). The default site
# asks for ~10,000 (many 1- and 2-GPU replicas), so it costs more per host.
ISSUE_SHAPES = [(2, 8, 0.40), (1, 8, 0.15)]
SITES = {"default": SHAPES, "issue": ISSUE_SHAPES}
MODELS_PER_SHAPE = 4
TB = 1024**4
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def host_name(i: int) -> str:
    return f"gpu-{i + 1:05d}"


def catalog(hosts: int, shapes: list[tuple[int, int, float]] = SHAPES) -> Catalog:
    models = []
    for nodes, gpus, share in shapes:
        per_model = share * hosts * GPUS / (nodes * gpus) / MODELS_PER_SHAPE
        for k in range(MODELS_PER_SHAPE):
            name = f"m{nodes}x{gpus}-{k}"
            models.append(Model.model_validate({
                "name": name, "source": f"hf://org/{name}/{name}.gguf",
                "scaling": {"min": round(per_model), "max": round(per_model) + 2},
                "profiles": [{"name": f"h100-{nodes}x{gpus}", "engine": "vllm", "gpus": gpus, "nodes": nodes,
                              "gpu_class": "H100-80GB", "min_memory_gb": 64}]}))
    return Catalog([Located(m, "catalog/bench.yaml", i + 1, i) for i, m in enumerate(models)])


def fleet(hosts: int, cat: Catalog, rnd: random.Random) -> tuple[dict[str, Host], dict[str, HostFacts]]:
    nodes, facts = {}, {}
    holders = {m.source: set(rnd.sample(range(hosts), max(1, hosts // 200))) for m in cat}
    for i in range(hosts):
        name = host_name(i)
        address = f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        nodes[name] = Host(name=name, groups=frozenset({"llmgw_nodes"}), mgmt_address=address)
        sick = rnd.random() < 0.005
        gpus = [Gpu(index=g, uuid=f"{name}-{g}", name="NVIDIA H100 80GB HBM3", gpu_class="H100-80GB",
                    problems=["uncorrectable ECC errors"] if sick and g == 0 else []) for g in range(GPUS)]
        weights = [Weights(path=f"/var/cache/llmgw/{cache_name(src)}", size_bytes=10**11, cache=True,
                           cache_name=cache_name(src)) for src, on in holders.items() if i in on]
        facts[name] = HostFacts(
            host=name, gathered_at=T0, cpus=192, memory_total_mb=2048 * 1024, gpus=gpus, weights=weights, units=[],
            filesystems=[Filesystem(mount="/", device="/dev/nvme0n1", fstype="ext4", shared=False,
                                    free_bytes=6 * TB, total_bytes=7 * TB, paths=["/var/cache/llmgw"])])
    return nodes, facts


def map_fabric(hosts: int, rnd: random.Random) -> MapFabrics:
    leaves = {host_name(i): {"ib-a": {rail: f"su{i // HOSTS_PER_SU:03d}-rail{r}" for r, rail in enumerate(RAILS)}}
              for i in range(hosts)}
    degraded = frozenset((host_name(i), "ib-a") for i in range(hosts) if rnd.random() < 0.01)
    return MapFabrics(leaves, degraded)


def real_fabric(hosts: int) -> FabricIndex:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fabric_parse import generate  # type: ignore[import-not-found]

    from llmgw.fabric import parse_ibnetdiscover
    from llmgw.fabric.index import FabricIndex as RealIndex

    return RealIndex.from_fabrics(parse_ibnetdiscover(generate(hosts).replace("gpu-", "gpu-"), source="bench"))


def best(runs: int, fn: Callable[[], Plan]) -> tuple[float, float, Plan]:
    """Best wall and CPU seconds of `runs` calls, and the result."""
    wall = cpu = float("inf")
    out: Plan | None = None
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    assert out is not None
    return wall, cpu, out


COMPUTE_RAILS = tuple(f"mlx5_{r}" for r in range(8))
SECOND_RAILS = ("mlx5_8", "mlx5_9")


def write_site(root: Path, hosts: int, shapes: list[tuple[int, int, float]] = SHAPES) -> None:
    """A site as `llmgw plan` reads it from disk (see --end-to-end)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fabric_parse import generate

    from llmgw.facts.records import IbAdapter
    from llmgw.weights.sources import SourceInfo, write_source

    rnd = random.Random(hosts)
    cat = catalog(hosts, shapes)
    _, facts = fleet(hosts, cat, rnd)
    for d in ("catalog", "inventory", "facts"):
        (root / d).mkdir(parents=True)
    (root / "llmgw.yaml").write_text("ports: {start: 20000, end: 29999}\n")
    (root / "catalog" / "models.yaml").write_text(json.dumps(
        {"models": [m.model_dump(mode="json", exclude_defaults=True) for m in cat]}, indent=1))
    lines = ["all:", "  children:", "    llmgw_nodes:", "      hosts:"]
    for i in range(hosts):
        lines += [f"        {host_name(i)}:", f"          ansible_host: 10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"]
    lines += ["    llmgw_routers:", "      hosts:", "        router-01:", "          ansible_host: 10.255.0.1"]
    (root / "inventory" / "hosts.yml").write_text("\n".join(lines) + "\n")
    fabrics = {0: generate(hosts, rails=COMPUTE_RAILS),
               1: generate(hosts, rails=SECOND_RAILS, guids=0x10_0000_0000, prefix="MF1")}
    for i, (name, f) in enumerate(sorted(facts.items())):
        f = f.model_copy(update={
            "ib_adapters": [IbAdapter(name=r, node_desc=f"{name} {r}") for r in COMPUTE_RAILS + SECOND_RAILS],
            "ibnetdiscover": fabrics.get(i)})
        (root / "facts" / f"{name}.json").write_text(f.model_dump_json())
    for m in cat:
        write_source(root / "facts", SourceInfo(source=m.source, cache_name=cache_name(m.source),
                                                size_bytes=10**11, format="gguf", inspected_at=T0))


def compile_llmgw() -> None:
    """Compile llmgw's modules to bytecode, as installing a wheel does, before a fresh process
    is timed. An editable install writes bytecode on first import, but not where
    PYTHONDONTWRITEBYTECODE is set (this project's machines set it): then every timed run
    compiled ~170 modules from source again, 0.06-0.15 s no installed llmgw pays. Python still
    compiles any module edited since (its bytecode is stale), so no result is ever stale."""
    import compileall

    import llmgw

    compileall.compile_dir(str(Path(llmgw.__file__).parent), quiet=2)


def llmgw_plan(root: Path) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its children) of one `llmgw plan --out`, with the
    memo of parsed facts and fabrics (llmgw.facts.memo) in the site's temporary folder."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    llmgw = str(Path(sys.executable).parent / "llmgw")
    subprocess.run([llmgw, "-C", str(root), "plan", "--out", str(root / "plan.json")],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "LLMGW_CACHE": str(root.parent / "cache")})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def end_to_end(sizes: list[int], repeat: int, profile: bool, site: str = "default") -> None:
    shapes = ", ".join(f"{n} node x {g} GPUs {share:.0%}" for n, g, share in SITES[site])
    print(f"site: {site} (replicas of {shapes} of the GPUs)")
    print(f"{'hosts':>6} {'GPUs':>6} {'replicas':>8} {'plan MB':>7} {'cold cpu s':>10} {'wall s':>7} {'cpu s':>6} "
          f"{'cpu s/1k hosts':>14} {'goal x':>6}")
    cpus: dict[int, float] = {}
    colds: dict[int, float] = {}
    compile_llmgw()
    for hosts in sizes:
        with tempfile.TemporaryDirectory(prefix="llmgw-bench-plan-") as tmp:
            root = Path(tmp) / "site"
            write_site(root, hosts, SITES[site])
            _, colds[hosts] = llmgw_plan(root)  # parses everything and fills the memo
            cold_bytes = (root / "plan.json").read_bytes()
            runs = [llmgw_plan(root) for _ in range(repeat)]  # facts and fabrics from the memo
            assert (root / "plan.json").read_bytes() == cold_bytes, "a plan from the memo differs"
            wall, cpu = min(w for w, _ in runs), min(c for _, c in runs)
            cpus[hosts] = cpu
            out = json.loads(cold_bytes)
            replicas = len(out["desired"]["replicas"])
            print(f"{hosts:6d} {hosts * GPUS:6d} {replicas:8d} {len(cold_bytes) / 1e6:7.1f} {colds[hosts]:10.2f} "
                  f"{wall:7.2f} {cpu:6.2f} {cpu / hosts * 1000:14.3f} {cpu / 1.0:6.2f}", flush=True)
            if profile and hosts == sizes[-1]:
                from llmgw.cli import main as cli_main

                # The memo the timed runs read (in-process, LLMGW_CACHE is this process's own):
                # without it the profile showed the cold parse, not the warm runs timed above.
                saved = os.environ.get("LLMGW_CACHE")
                os.environ["LLMGW_CACHE"] = str(root.parent / "cache")
                prof = cProfile.Profile()
                prof.enable()
                with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                    cli_main(["-C", str(root), "plan", "--out", str(root / "plan.json")])
                prof.disable()
                if saved is None:
                    os.environ.pop("LLMGW_CACHE")
                else:
                    os.environ["LLMGW_CACHE"] = saved
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(30)
                print(buf.getvalue(), file=sys.stderr)
    lo, hi = sizes[0], sizes[-1]
    if hi > lo:
        print(f"growth {lo} -> {hi} hosts ({hi / lo:.0f}x): CPU {cpus[hi] / cpus[lo]:.1f}x "
              f"(cold, no memo: {colds[hi] / colds[lo]:.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="512,1024,2048,4096")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the best counts")
    ap.add_argument("--fabric", choices=["map", "real"], default="map")
    ap.add_argument("--end-to-end", action="store_true", help="time the whole `llmgw plan` command")
    ap.add_argument("--profile", action="store_true", help="with --end-to-end: where the time goes")
    ap.add_argument("--site", choices=["default", "issue", "both"], default="default",
                    help="with --end-to-end: the catalog's shapes (issue: #17's ~1,500 whole- and two-node replicas)")
    args = ap.parse_args()
    if args.end_to_end:
        for site in (["default", "issue"] if args.site == "both" else [args.site]):
            end_to_end([int(s) for s in args.sizes.split(",")], args.repeat, args.profile, site)
        return
    print(f"{'hosts':>6} {'GPUs':>6} {'replicas':>8} {'GPUs used':>9} {'unplaced':>8} "
          f"{'plan s':>7} {'cpu s':>6} {'replan s':>8} {'cpu s':>6} {'cpu s/1k hosts':>14}")
    for hosts in (int(s) for s in args.sizes.split(",")):
        rnd = random.Random(hosts)
        cat = catalog(hosts)
        nodes, facts = fleet(hosts, cat, rnd)
        fabrics: FabricIndex = map_fabric(hosts, rnd) if args.fabric == "map" else real_fabric(hosts)
        inputs = PlanInputs(catalog=cat, nodes=nodes, facts=facts, state=State(lineage="bench"), fabrics=fabrics,
                            ports=PortRange(start=20000, end=20999),
                            weight_sizes={m.source: 10**11 for m in cat})
        wall, cpu, plan = best(args.repeat, lambda inputs=inputs: make_plan(inputs))  # type: ignore[misc]
        applied = plan.applied(inputs.state)
        again = PlanInputs(catalog=cat, nodes=nodes, facts=facts, state=applied, fabrics=fabrics,
                           ports=inputs.ports, weight_sizes=inputs.weight_sizes)
        wall2, cpu2, replan = best(args.repeat, lambda again=again: make_plan(again))  # type: ignore[misc]
        assert not replan.has_changes, "a re-plan of an applied plan changes nothing"
        used = sum(len(s.gpus) for r in plan.desired.replicas for s in r.shards)
        print(f"{hosts:6d} {hosts * GPUS:6d} {len(plan.desired.replicas):8d} {used / (hosts * GPUS):9.1%} "
              f"{len(plan.unplaced):8d} {wall:7.2f} {cpu:6.2f} {wall2:8.2f} {cpu2:6.2f} "
              f"{cpu / hosts * 1000:14.3f}", flush=True)


if __name__ == "__main__":
    main()
