"""Fabrics the parser has never seen, written in the exact text of real captures.

`three_tier()` builds a rail-optimised fabric of pods, scalable units (SUs), leaves,
spines and cores, with names, GUIDs, port counts and rates unlike the shared fixtures,
and returns what a correct parse must find. `synth_from_graph()` rebuilds a parsed
capture, which is how the tests prove the writer prints what ibnetdiscover prints.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from llmgw.fabric.graph import Graph
from llmgw.fabric.synth import SynthFabric, SynthNode

# The device names a DGX H100 gives its eight compute adapters (Ethernet ports take the
# numbers in between), so rails are not simply mlx5_0..7.
DGX_RAILS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
SWITCH_BASE = 0x9803_9B03_0042_0000
CA_BASE = 0x9403_DA03_00F1_0000


@dataclass
class Built:
    fab: SynthFabric
    leaves: dict[tuple[int, str], SynthNode] = field(default_factory=dict)  # (su, rail)
    spines: list[SynthNode] = field(default_factory=list)
    cores: list[SynthNode] = field(default_factory=list)
    hcas: dict[tuple[str, str], SynthNode] = field(default_factory=dict)  # (host, rail)
    # what a correct parse finds
    tiers: dict[str, tuple[str, int]] = field(default_factory=dict)  # switch -> (tier, hops)
    adapters: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)

    def text(self, seed: int = 7) -> str:
        """The capture, nodes in a shuffled order as real ibnetdiscover prints them."""
        random.Random(seed).shuffle(self.fab.nodes)
        return self.fab.topology(next(iter(self.hcas.values())))

    def ports_text(self, seed: int = 7) -> str:
        random.Random(seed).shuffle(self.fab.nodes)
        return self.fab.ports_report()


def three_tier(*, pods: int = 2, sus_per_pod: int = 2, hosts_per_su: int = 4,
               rails: tuple[str, ...] = DGX_RAILS[:4], spines_per_pod: int = 2, cores: int = 2,
               rate: str = "4xNDR", swap: tuple[str, str, str] | None = None) -> Built:
    """Leaves per (SU, rail), spines per pod cabled to every leaf of the pod, cores
    cabled to every spine. `swap=(host_a, host_b, rail)` crosses two hosts' cables."""
    fab = SynthFabric(generated="Tue Mar  3 11:07:45 2026")
    b = Built(fab)
    guid = iter(range(SWITCH_BASE, SWITCH_BASE + 100_000))
    ports = 64  # QM9700
    for c in range(cores):
        b.cores.append(fab.switch(f"QM9700;dc7-core-{c + 1:02d}:MQM9700/U1", next(guid),
                                  ports=ports))
    hosts: list[tuple[str, int]] = []  # (host, su)
    for p in range(pods):
        pod_spines = [fab.switch(f"QM9700;dc7-pod{p + 1}-spine-{s + 1:02d}:MQM9700/U1",
                                 next(guid), ports=ports) for s in range(spines_per_pod)]
        b.spines += pod_spines
        for u in range(sus_per_pod):
            su = p * sus_per_pod + u
            for r, rail in enumerate(rails):
                leaf = fab.switch(f"QM9700;dc7-su{su + 1:02d}-rail{r}:MQM9700/U1", next(guid),
                                  ports=ports)
                b.leaves[(su, rail)] = leaf
                for s, spine in enumerate(pod_spines):
                    fab.connect(leaf, ports - s, spine, (u * len(rails) + r) + 1, rate)
            for h in range(hosts_per_su):
                hosts.append((f"dgx-h100-{su * hosts_per_su + h + 1:03d}", su))
        for s, spine in enumerate(pod_spines):
            for c, core in enumerate(b.cores):
                fab.connect(spine, ports - c, core, p * spines_per_pod + s + 1, rate)
    ca_guid = iter(range(CA_BASE, CA_BASE + 1_000_000, 2))
    place = {(host, rail): (su, i % hosts_per_su + 1)
             for i, (host, su) in enumerate(hosts) for rail in rails}
    if swap is not None:
        ha, hb, rail = swap
        place[(ha, rail)], place[(hb, rail)] = place[(hb, rail)], place[(ha, rail)]
    for host, _ in hosts:
        for rail in rails:
            hca = fab.ca(f"{host} {rail}", next(ca_guid))
            b.hcas[(host, rail)] = hca
            su, port = place[(host, rail)]
            leaf = b.leaves[(su, rail)]
            fab.connect(leaf, port, hca, 1, rate)
            b.adapters.setdefault(host, {})[rail] = (leaf.description, port)
    for leaf in b.leaves.values():
        b.tiers[leaf.description] = ("leaf", 1)
    for spine in b.spines:
        b.tiers[spine.description] = ("spine", 2)
    for core in b.cores:
        b.tiers[core.description] = ("core", 3)
    return b


def synth_from_graph(graph: Graph, header: str) -> SynthFabric:
    """A writer holding exactly the nodes, LIDs and cables of a parsed capture."""
    generated = re.search(r"generated on (.*)", header)
    fab = SynthFabric(generated=generated[1] if generated else "")
    made: dict[str, SynthNode] = {}
    for key, n in graph.nodes.items():
        assert n.guid is not None and n.nports is not None
        if n.kind == "switch":
            assert n.lid is not None
            made[key] = fab.switch(n.description, n.guid, ports=n.nports, lid=n.lid)
        else:
            made[key] = fab.ca(n.description, n.guid, ports=n.nports,
                               lid=next(iter(n.ports.values())).lid)
    for c in graph.cables():
        fab.connect(made[c.a.key], c.a_port.port, made[c.b.key], c.b_port.port, str(c.rate))
    return fab
