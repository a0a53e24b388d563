"""How long parsing a large fabric's ibnetdiscover output takes, and whether it stays linear.

    .venv/bin/python bench/fabric_parse.py [--hosts 2000] [--repeat 3]

Generates, in the exact text of real captures, a rail-optimised three-tier fabric of
QM8790-class 40-port switches: scalable units of 20 hosts x 8 adapters (one leaf per
unit and rail, 20 ports down and 20 up), pods of 20 leaves under 20 spines, and 400
cores. At 2,000 hosts that is 16,000 adapters, 2,000 switches, 48,000 cables and
about 200,000 lines. It parses the text at a quarter, half and all of the size and
prints the best wall and CPU time of each, and CPU time per 1,000 hosts, which is
flat when parsing is linear. On a shared machine wall time follows the load; CPU time
and the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import time

from llmgw.fabric import Fabric, parse_ibnetdiscover
from llmgw.fabric.synth import SynthFabric, SynthNode

RAILS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")
HOSTS_PER_SU = 20  # leaf ports 1-20 down, 21-40 up
LEAVES_PER_POD = 20  # = uplinks per leaf = spines per pod
CORES = 400  # spine uplinks 20 per spine, one per core in its group of 20


def generate(hosts: int, *, rails: tuple[str, ...] = RAILS, guids: int = 0, prefix: str = "MF0") -> str:
    """The fabric's ibnetdiscover text; `guids` shifts every GUID and `prefix` names the
    switches, so a second fabric (bench/plan.py) is a separate subnet with its own id."""
    fab = SynthFabric()
    guid = iter(range(0x0C42_A103_0070_0000 + guids, 0x0C42_A103_0080_0000 + guids))
    sus = -(-hosts // HOSTS_PER_SU)
    # A core has a port per pod: 40 (QM8790) up to 2,000 hosts x 8 rails, more beyond.
    pods = -(-sus * len(rails) // LEAVES_PER_POD)
    cores = [fab.switch(f"{prefix};core-{c + 1:03d}:MQM8790/U1", next(guid), ports=max(40, pods))
             for c in range(CORES)]
    leaves: dict[tuple[int, int], SynthNode] = {}
    for su in range(sus):
        for r in range(len(rails)):
            leaves[(su, r)] = fab.switch(f"{prefix};su{su + 1:03d}-rail{r}:MQM8790/U1", next(guid))
    ordered = list(leaves.values())
    for p in range(-(-len(ordered) // LEAVES_PER_POD)):
        pod = ordered[p * LEAVES_PER_POD:(p + 1) * LEAVES_PER_POD]
        for j in range(LEAVES_PER_POD):
            spine = fab.switch(f"{prefix};pod{p + 1:02d}-spine-{j + 1:02d}:MQM8790/U1", next(guid))
            for i, leaf in enumerate(pod):
                fab.connect(leaf, HOSTS_PER_SU + 1 + j, spine, i + 1)
            for u in range(20):
                fab.connect(spine, 21 + u, cores[j * 20 + u], p + 1)
    ca_guid = iter(range(0xB83F_D203_0070_0000 + guids, 0xB83F_D203_0080_0000 + guids, 2))
    for h in range(hosts):
        su, port = divmod(h, HOSTS_PER_SU)
        for r, rail in enumerate(rails):
            hca = fab.ca(f"gpu-{h + 1:05d} {rail}", next(ca_guid))
            fab.connect(leaves[(su, r)], port + 1, hca, 1)
    return fab.topology()


def check(fabric: Fabric, hosts: int) -> None:
    """The benchmark measures a correct parse, not just a fast one."""
    assert len(fabric.hosts) == hosts, len(fabric.hosts)
    tiers = fabric.tier_counts()
    assert tiers["leaf"] == -(-hosts // HOSTS_PER_SU) * len(RAILS), tiers
    assert fabric.rails.aligned is True, fabric.rails.problems[:3]
    assert fabric.degraded_links == ()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the best counts")
    args = ap.parse_args()
    sizes = sorted({max(HOSTS_PER_SU, args.hosts // 4), max(HOSTS_PER_SU, args.hosts // 2),
                    args.hosts})
    print(f"{'hosts':>6} {'adapters':>8} {'switches':>8} {'cables':>7} {'lines':>8} {'MB':>5} "
          f"{'wall s':>7} {'cpu s':>6} {'cpu s/1k hosts':>14}")
    cpus: dict[int, float] = {}
    for hosts in sizes:
        text = generate(hosts)
        wall = cpu = float("inf")
        fabric: Fabric | None = None
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            (fabric,) = parse_ibnetdiscover(text, source="bench")
            wall = min(wall, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        assert fabric is not None
        check(fabric, hosts)
        adapters = sum(len(a) for a in fabric.hosts.values())
        print(f"{hosts:6d} {adapters:8d} {len(fabric.switches):8d} {len(fabric.links):7d} "
              f"{text.count(chr(10)):8d} {len(text) / 1e6:5.1f} {wall:7.2f} {cpu:6.2f} "
              f"{cpu / hosts * 1000:14.3f}", flush=True)
        cpus[hosts] = cpu
    lo, hi = sizes[0], sizes[-1]
    if hi > lo:  # linear: the CPU ratio equals the size ratio
        print(f"growth {lo} -> {hi} hosts ({hi / lo:.0f}x): CPU {cpus[hi] / cpus[lo]:.1f}x; "
              f"{hi * len(RAILS)} adapters in {cpus[hi]:.2f} s CPU (goal: 1 s)")


if __name__ == "__main__":
    main()
