"""Where one replica of a profile can go: filters that reject with a sentence, preferences that rank.

Filters (each names the node and the shortfall): node state ready, node_selector labels,
GPU class, enough healthy free GPUs, memory, local disk for the weights (skipped where
they already are), and for multi-node profiles whole nodes on one fabric. A node that
did not report a resource passes that filter: an old or unconfigured host is not a
small one. GPUs are the exception that proves the rule: a shard is given GPU indices,
and a node whose GPUs are not known has none to give.

Preferences never reject: nodes holding the weights first; for multi-node replicas one
leaf, aligned rails and full-rate cables; then packing onto partly used nodes (fewest
GPUs left over) so whole nodes stay free for multi-node replicas; then name order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from llmgw.catalog import Model, Profile
from llmgw.planner.fleet import BYTES_PER_GB, MB_PER_GB, Fleet, GpuIndex, NodeView, StaticKey, fmt_gb


@dataclass(frozen=True)
class Need:
    """One shard's worth of asks: a model's profile, its weights and their size (None: not known)."""

    model: Model
    profile: Profile
    cache_name: str
    size: int | None

    @property
    def source(self) -> str:
        return self.model.source

    @property
    def key(self) -> StaticKey:
        p = self.profile
        return StaticKey(p.gpu_class, tuple(sorted(p.node_selector.items())), p.gpus, p.min_memory_gb,
                         p.nodes > 1)


@dataclass(frozen=True)
class Choice:
    """The nodes picked for a replica, in rank order, and the fabric joining them (multi-node)."""

    nodes: tuple[NodeView, ...]
    fabric: str | None = None


@dataclass(frozen=True)
class Verdict:
    """Why a node (or a fabric) cannot take a shard; `reason` None means it could."""

    node: str | None
    fabric: str | None
    reason: str | None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _selector_mismatch(node: NodeView, selector: tuple[tuple[str, str], ...]) -> str | None:
    wanted, have = [], []
    for k, v in selector:
        actual = node.host.labels.get(k)
        if actual != v:
            wanted.append(f"{k}={v}")
            have.append(f"no {k} label" if actual is None else f"{k}={actual}")
    if not wanted:
        return None
    return f"{node.name}: does not match node_selector {', '.join(wanted)} (has {', '.join(have)})"


def static_reason(node: NodeView, key: StaticKey, nodes_wanted: int) -> str | None:
    """Why `node` can never take a shard of this kind in this plan, or None."""
    n = node.name
    if node.host.node_state != "ready":
        return f"{n}: {node.host.node_state}"
    if key.selector and (why := _selector_mismatch(node, key.selector)):
        return why
    if key.gpus > 0:
        cls = f"{key.gpu_class} " if key.gpu_class else ""
        if node.facts is None:
            return f"{n}: no facts gathered yet, needs {key.gpus} {cls}GPUs (run `llmgw facts`)"
        if node.gpus is None:
            why = node.facts.gpus_unknown_reason or "not reported"
            return f"{n}: GPUs not known ({why}), needs {key.gpus} {cls}GPUs"
        if not node.gpus:
            return f"{n}: has no GPUs, needs {key.gpus}"
        pool = node.pool(key.gpu_class)
        if not pool.total:
            classes: dict[str, int] = {}
            for g in node.gpus:
                classes[g.gpu_class] = classes.get(g.gpu_class, 0) + 1
            has = ", ".join(f"{c} {k}" for k, c in sorted(classes.items()))
            return f"{n}: has no {key.gpu_class} GPUs (has {has}), needs {key.gpus}"
        if len(pool.total) < key.gpus:
            return f"{n}: has {_plural(len(pool.total), cls + 'GPU')}, needs {key.gpus}"
    if key.memory_gb > 0 and node.mem_mb is not None and node.mem_mb < key.memory_gb * MB_PER_GB:
        return f"{n}: has {fmt_gb(node.mem_mb / MB_PER_GB)} GB of memory, needs {fmt_gb(key.memory_gb)}"
    if key.multi_node and not node.fabrics:
        return f"{n}: on no InfiniBand fabric, and a {nodes_wanted}-node profile needs one"
    return None


def dynamic_reason(fleet: Fleet, node: NodeView, need: Need, *, gpus_checked: bool = False) -> str | None:
    """Why `node` cannot take a shard now, given what this plan has taken so far, or None."""
    n, p = node.name, need.profile
    if p.gpus > 0 and not gpus_checked:
        pool = node.pool(p.gpu_class)
        free = node.free_count(p.gpu_class)
        if free < p.gpus:
            cls = f"{p.gpu_class} " if p.gpu_class else ""
            sick = "; ".join(f"GPU {g.index} unhealthy: {g.problems[0]}" for g in pool.unhealthy[:2])
            if len(pool.unhealthy) > 2:
                sick += f"; {len(pool.unhealthy) - 2} more unhealthy"
            return (f"{n}: {free} of {len(pool.total)} {cls}GPUs free, needs {p.gpus}"
                    + (f" ({sick})" if sick else ""))
    if p.min_memory_gb > 0 and (avail := node.mem_available_mb) is not None and avail < p.min_memory_gb * MB_PER_GB:
        assert node.mem_mb is not None
        return (f"{n}: {fmt_gb(max(avail, 0) / MB_PER_GB)} of {fmt_gb(node.mem_mb / MB_PER_GB)} GB of memory "
                f"unreserved, needs {fmt_gb(p.min_memory_gb)}")
    if need.size is not None and not node.holds(need.source, need.cache_name) \
            and not fleet.pending_on(node, need.source):
        free_b = fleet.disk_free(node)
        if free_b is not None and free_b < need.size:
            fs = node.cache_fs
            assert fs is not None
            where = f"shared {fs.mount}" if fs.shared else fs.mount
            return (f"{n}: {fmt_gb(max(free_b, 0) / BYTES_PER_GB)} GB free on {where} for {node.host.cache_dir}, "
                    f"weights need {fmt_gb(need.size / BYTES_PER_GB)}")
    if node.free_port(fleet.ports) is None:
        return f"{n}: every port in {fleet.ports.start}-{fleet.ports.end} is taken"
    return None


def static_set(fleet: Fleet, need: Need) -> list[NodeView]:
    key = need.key
    members = fleet.static_sets.get(key)
    if members is None:
        members = [n for n in fleet.nodes if static_reason(n, key, need.profile.nodes) is None]
        fleet.static_sets[key] = members
        fleet.static_members[key] = frozenset(n.ordinal for n in members)
    return members


def _pack(node: NodeView, gpu_class: str | None) -> tuple[bool, int]:
    """Packing preference: partly used nodes first, then the fewest free GPUs (best fit)."""
    return (not node.partly_used, node.free_count(gpu_class))


def _pop_fit(fleet: Fleet, idx: GpuIndex, slot: tuple[bool, int], need: Need) -> NodeView | None:
    """The lowest-named node in one bucket that passes the remaining filters."""
    heap = idx.buckets.get(slot)
    if not heap:
        return None
    skipped: list[int] = []
    found: NodeView | None = None
    while heap:
        node = fleet.nodes[heap[0]]
        if idx.slot(node) != slot:
            heapq.heappop(heap)  # stale: the node moved to another bucket
            continue
        if dynamic_reason(fleet, node, need, gpus_checked=True) is None:
            found = node
            break
        skipped.append(heapq.heappop(heap))
    for o in skipped:
        heapq.heappush(heap, o)
    return found


def _choose_single(fleet: Fleet, need: Need, members: list[NodeView]) -> Choice | None:
    p = need.profile
    inside = fleet.static_members[need.key]
    holders = [n for n in fleet.holders(need.source, need.cache_name) if n.ordinal in inside]
    fits = [n for n in holders if dynamic_reason(fleet, n, need) is None]
    if fits:
        return Choice((min(fits, key=lambda n: (*_pack(n, p.gpu_class), n.ordinal)),))
    if p.gpus == 0:
        # CPU shards go to nodes without GPUs first, so GPU nodes keep their memory for GPU work.
        for n in sorted(members, key=lambda n: (bool(n.gpus), n.ordinal)):
            if dynamic_reason(fleet, n, need) is None:
                return Choice((n,))
        return None
    idx = fleet.index(need.key, members)
    for partly in (True, False):
        for free in range(p.gpus, idx.max_free + 1):
            node = _pop_fit(fleet, idx, (partly, free), need)
            if node is not None:
                return Choice((node,))
    return None


def _eligible(fleet: Fleet, need: Need, members: list[NodeView]) -> list[NodeView]:
    """Nodes that could take one shard now, through the GPU index (so full nodes cost nothing)."""
    idx = fleet.index(need.key, members)
    seen: set[int] = set()
    out: list[NodeView] = []
    for (partly, free), heap in idx.buckets.items():
        if free < need.profile.gpus:
            continue
        for o in heap:
            node = fleet.nodes[o]
            if o in seen or idx.slot(node) != (partly, free):
                continue
            seen.add(o)
            if dynamic_reason(fleet, node, need, gpus_checked=True) is None:
                out.append(node)
    return sorted(out, key=lambda n: n.ordinal)


def _by_fabric(nodes: list[NodeView]) -> dict[str, list[NodeView]]:
    groups: dict[str, list[NodeView]] = {}
    for n in nodes:
        for f in n.fabrics:
            groups.setdefault(f, []).append(n)
    return groups


def _choose_multi(fleet: Fleet, need: Need, members: list[NodeView]) -> Choice | None:
    p = need.profile
    want = p.nodes
    holders = {n.ordinal for n in fleet.holders(need.source, need.cache_name)}
    best: tuple[tuple[object, ...], Choice] | None = None
    for fabric, nodes in sorted(_by_fabric(_eligible(fleet, need, members)).items()):
        if len(nodes) < want:
            continue

        def pref(n: NodeView, fabric: str = fabric) -> tuple[object, ...]:
            return (n.degraded.get(fabric, False), n.ordinal not in holders, *_pack(n, p.gpu_class), n.ordinal)

        def cheap(c: tuple[NodeView, ...], fabric: str = fabric) -> tuple[int, int, int, int, list[int]]:
            return (sum(n.degraded.get(fabric, False) for n in c), -sum(n.ordinal in holders for n in c),
                    sum(not n.partly_used for n in c), sum(n.free_count(p.gpu_class) for n in c),
                    sorted(n.ordinal for n in c))

        candidates: list[tuple[NodeView, ...]] = []
        leaf_groups: dict[tuple[tuple[str, str], ...], list[NodeView]] = {}
        for n in nodes:
            sig = n.leaves.get(fabric, ())
            if sig:
                leaf_groups.setdefault(sig, []).append(n)
        # Nodes with identical adapter->leaf maps share their leaves and are rail-aligned:
        # the best few such groups are candidates, and so are the best nodes regardless of leaf.
        for group in leaf_groups.values():
            if len(group) >= want:
                candidates.append(tuple(sorted(group, key=pref)[:want]))
        candidates.sort(key=cheap)
        candidates = candidates[:3]
        candidates.append(tuple(sorted(nodes, key=pref)[:want]))
        for cand in candidates:
            names = [n.name for n in cand]
            score: tuple[object, ...] = (
                not fleet.fabric_index.share_leaf(names, fabric),
                not fleet.fabric_index.rails_aligned(names, fabric),
                *cheap(cand),
                fabric,
            )
            if best is None or score < best[0]:
                ranked = tuple(sorted(cand, key=lambda n: n.ordinal))
                best = (score, Choice(ranked, fabric))
    return None if best is None else best[1]


def choose(fleet: Fleet, need: Need) -> Choice | None:
    """The best place for one replica of `need.profile`, or None when nothing passes every filter."""
    members = static_set(fleet, need)
    if not members:
        return None
    if need.profile.nodes > 1:
        return _choose_multi(fleet, need, members)
    return _choose_single(fleet, need, members)


def verdicts(fleet: Fleet, need: Need) -> list[Verdict]:
    """Every node's answer for one shard of `need` now, and for multi-node profiles each fabric's."""
    key = need.key
    out: list[Verdict] = []
    fits: list[NodeView] = []
    for n in fleet.nodes:
        why = static_reason(n, key, need.profile.nodes) or dynamic_reason(fleet, n, need)
        out.append(Verdict(n.name, None, why))
        if why is None:
            fits.append(n)
    if need.profile.nodes > 1:
        counts = {f: len(ns) for f, ns in _by_fabric(fits).items()}
        for n in static_set(fleet, need):
            for f in n.fabrics:
                counts.setdefault(f, 0)
        for f, k in sorted(counts.items()):
            why = None if k >= need.profile.nodes else (
                f"fabric {f}: {_plural(k, 'node')} with {_plural(need.profile.gpus, 'GPU')} free, "
                f"needs {need.profile.nodes}")
            out.append(Verdict(None, f, why))
    return out


def rejections(fleet: Fleet, need: Need) -> list[Verdict]:
    """The verdicts that reject: what an operator reads when a model cannot be placed."""
    return [v for v in verdicts(fleet, need) if v.reason is not None]
