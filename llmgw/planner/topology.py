"""Which GPU indices of a host a shard gets, and which InfiniBand adapters go with them.

A shard's GPUs talk to each other on every step (tensor parallelism): NVLink or one PCIe
switch is far faster than a host bridge, and crossing the CPU interconnect (another NUMA
node) is slowest of all. So a shard's GPUs are packed at the closest common level that
fits, from the facts gpu_facts records (NVML's topology level between every two GPUs,
NVLink peers, NUMA nodes), best fit first so that whole NUMA nodes stay free for the
next shard. NCCL is then given the adapters nearest those GPUs (the same PCIe root, else
the same NUMA node), so traffic to other nodes never crosses the CPU interconnect.

A host without topology facts keeps the old rule (the lowest free indices): nothing is
guessed. Pure functions of facts; the reconciler calls them once per shard.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmgw.facts import TOPOLOGY_LEVELS, Gpu, IbAdapter

# A pair's distance: 0 NVLink, then NVML's PCIe levels closest first (internal shares the
# board, which on the parts that report it means NVLink too).
_RANK = {level: i for i, level in enumerate(TOPOLOGY_LEVELS)}
_RANK["internal"] = 0
NVLINK = 0
SAME_NUMA = _RANK["node"]
ACROSS = _RANK["system"]
# What each distance means, for the plan and `explain`.
LEVEL_WORDS = {0: "NVLink", 1: "one PCIe switch", 2: "PCIe switches below one host bridge",
               3: "one host bridge", 4: "one NUMA node", 5: "across NUMA nodes (the CPU interconnect)"}


@dataclass(frozen=True)
class GpuMap:
    """A host's GPUs as placement weighs them: the distance between every two (None when the
    facts do not say), and each one's NUMA node and PCIe root."""

    dist: Mapping[tuple[int, int], tuple[int, int]]  # (a, b) -> (with NVLink, PCIe alone)
    numa: Mapping[int, int]
    roots: Mapping[int, str]


def gpu_map(gpus: Sequence[Gpu]) -> GpuMap | None:
    """The host's map, or None when its facts say nothing of topology (old facts, no NVML
    topology, no NUMA information): placement then keeps the lowest free indices."""
    numa = {g.index: g.numa_node for g in gpus if g.numa_node is not None}
    if not numa and not any(g.topology or g.nvlink_peers for g in gpus):
        return None
    dist: dict[tuple[int, int], tuple[int, int]] = {}
    for a in gpus:
        for b in gpus:
            if b.index <= a.index:
                continue
            level = (a.topology or {}).get(b.index) or (b.topology or {}).get(a.index)
            if level is not None:
                pcie = _RANK[level]
            elif a.index in numa and b.index in numa:
                pcie = SAME_NUMA if numa[a.index] == numa[b.index] else ACROSS
            else:
                continue  # not known: such a pair is never chosen over a known one
            linked = b.index in (a.nvlink_peers or ()) or a.index in (b.nvlink_peers or ()) or level == "internal"
            dist[(a.index, b.index)] = dist[(b.index, a.index)] = (NVLINK if linked else pcie, pcie)
    roots = {g.index: g.pci_root for g in gpus if g.pci_root is not None}
    return GpuMap(dist, numa, roots)


_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Za-z-]{1,90}$")


def uuids_of(gpus: Sequence[Gpu]) -> dict[int, str]:
    """Index -> UUID for the GPUs whose UUID NVML gave (`GPU-...`): CUDA_VISIBLE_DEVICES by UUID
    names the same GPU whatever order CUDA enumerates them in; a lost GPU's `unknown-N` is none."""
    return {g.index: g.uuid for g in gpus if _UUID.match(g.uuid)}


def topology_signature(gpus: Sequence[Gpu]) -> tuple[object, ...] | None:
    """What `gpu_map` reads of the GPUs, hashable: hosts with equal signatures have equal maps
    (a fleet is a few models of host, so the planner builds a few maps, not one per host).
    None when the facts hold no topology (`gpu_map` is then None too)."""
    if not any(g.numa_node is not None or g.topology or g.nvlink_peers for g in gpus):
        return None
    return tuple((g.index, g.numa_node, g.pci_root, tuple(sorted((g.topology or {}).items())),
                  tuple(g.nvlink_peers or ())) for g in gpus)


_UNKNOWN = (ACROSS + 1, ACROSS + 1)  # a pair the facts say nothing of ranks last


@dataclass(frozen=True)
class Pick:
    """A shard's GPU indices and why: the level they share (LEVEL_WORDS), and their NUMA node
    when they share one."""

    gpus: list[int]
    level: str | None  # None: no topology facts (the lowest free indices)
    numa_node: int | None


def pick_gpus(free: Sequence[int], n: int, m: GpuMap | None) -> Pick:
    """`n` of the `free` indices (ascending), packed at the closest level that fits.

    Each free GPU seeds a set of itself and its n-1 nearest free GPUs; the set with the
    closest worst pair wins, then the one whose seed has the fewest free GPUs that close
    (best fit: a half-used NUMA node is filled before a whole one is broken into), then the
    lowest indices. Eight GPUs make 8 seeds of 28 pairs at most: cheap at fleet scale.
    """
    if m is None or n <= 1 or len(free) <= n:
        chosen = list(free[:n])
        return Pick(chosen, _level(chosen, m), _common_numa(chosen, m))
    dist = m.dist
    best: tuple[tuple[int, int], int, list[int]] | None = None
    for seed in free:
        near = sorted((x for x in free if x != seed), key=lambda x: (dist.get((seed, x), _UNKNOWN), x))
        chosen = sorted([seed, *near[:n - 1]])
        worst = max(dist.get((a, b), _UNKNOWN) for i, a in enumerate(chosen) for b in chosen[i + 1:])
        fit = sum(1 for x in free if x == seed or dist.get((seed, x), _UNKNOWN) <= worst)
        cand = (worst, fit, chosen)
        if best is None or cand < best:
            best = cand
    assert best is not None
    return Pick(best[2], LEVEL_WORDS.get(best[0][0]), _common_numa(best[2], m))


def _level(chosen: Sequence[int], m: GpuMap | None) -> str | None:
    if m is None or len(chosen) < 2:
        return None
    worst = max(m.dist.get((a, b), _UNKNOWN) for i, a in enumerate(chosen) for b in chosen[i + 1:])
    return LEVEL_WORDS.get(worst[0])


def _common_numa(chosen: Sequence[int], m: GpuMap | None) -> int | None:
    if m is None or not chosen:
        return None
    nodes = {m.numa.get(i) for i in chosen}
    return nodes.pop() if len(nodes) == 1 and None not in nodes else None


def nearest_hcas(rails: Sequence[str], adapters: Sequence[IbAdapter] | None, gpus: Sequence[int],
                 m: GpuMap | None) -> tuple[list[str], str]:
    """The NCCL_IB_HCA names (`mlx5_0:1`, as llmgw.apply.wiring writes them) of `rails` (the node's
    adapter ports on the replica's fabric, `mlx5_0/1`) nearest the shard's GPUs, and why: those on the GPUs' PCIe
    roots, else on their NUMA node, else every one on the fabric (nothing nearer is known)."""
    every = sorted(r.replace("/", ":") for r in rails)
    by_name = {a.name: a for a in adapters or ()}

    def pick(ok: set[str]) -> list[str]:
        return sorted(r.replace("/", ":") for r in rails if r.split("/", 1)[0] in ok)

    if m is not None and gpus:
        roots = {m.roots[g] for g in gpus if g in m.roots}
        on_root = {a.name for a in by_name.values() if a.pci_root is not None and a.pci_root in roots}
        if (found := pick(on_root)):
            return found, "on the GPUs' PCIe roots"
        nodes = {m.numa[g] for g in gpus if g in m.numa}
        on_node = {a.name for a in by_name.values() if a.numa_node is not None and a.numa_node in nodes}
        if (found := pick(on_node)):
            return found, f"on NUMA node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, sorted(nodes)))}"
    return every, "every adapter of the node on the fabric (none known nearer the GPUs)"
