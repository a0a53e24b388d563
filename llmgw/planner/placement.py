"""Where one replica of a profile can go: filters that reject with a sentence, preferences that rank.

Filters (each names the node and the shortfall): node state ready, node_selector labels,
GPU class, enough healthy free GPUs, memory, local disk for the weights (skipped where
they already are), and for multi-node profiles whole nodes on one fabric. A node that
did not report a resource passes that filter: an old or unconfigured host is not a
small one. GPUs are the exception that proves the rule: a shard is given GPU indices,
and a node whose GPUs are not known has none to give.

Preferences never reject. For single-node replicas, spread comes first, as Kubernetes'
topology spread does: a node without a replica of the same model (same weights) before
one with, then a failure domain without one — the host's `llmgw_failure_domain`, then
each host label the model names in `spread:`, then the leaf switches it hangs off.
Among equally spread nodes: the ones holding the weights (so weights break ties, never
the other way round); for multi-node replicas one leaf, aligned rails and full-rate
cables; then packing onto partly used nodes (fewest GPUs left over) so whole nodes stay
free for multi-node replicas; then name order.

Why long: every filter and preference judges the same `Need` against the same node
views, each a few lines with its own sentence; apart, each would rebuild that context.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from llmgw.catalog import Model, Profile
from llmgw.engines import get
from llmgw.planner.fleet import (
    BYTES_PER_GB,
    MB_PER_GB,
    Candidate,
    Fleet,
    GroupId,
    LeafGroups,
    MultiPrefs,
    NodeView,
    RankedGroup,
    SetScore,
    StaticKey,
    fmt_gb,
    in_model_dirs,
    model_file,
)
from llmgw.planner.spreading import GROUPINGS, SPREADS, Grouping, SpreadIndex
from llmgw.stack import requirements, stack_reason


@dataclass(frozen=True)
class Need:
    """One shard's worth of asks: a model's profile, its weights and their size (None: not known)."""

    model: Model
    profile: Profile
    cache_name: str
    size: int | None
    # Derived once: the filters read these for every node they look at.
    source: str = field(init=False)
    gpus: int = field(init=False)
    gpu_class: str | None = field(init=False)
    memory_mb: float = field(init=False)
    key: StaticKey = field(init=False)

    def __post_init__(self) -> None:
        p = self.profile
        for name, value in (("source", self.model.source), ("gpus", p.gpus), ("gpu_class", p.gpu_class),
                            ("memory_mb", p.min_memory_gb * MB_PER_GB),
                            ("key", StaticKey(p.gpu_class, tuple(sorted(p.node_selector.items())), p.gpus,
                                              p.min_memory_gb, needs_fabric(p), model_file(self.model.source),
                                              requirements(p.requires, get(p.engine), p.gpus)))):
            object.__setattr__(self, name, value)


def needs_fabric(p: Profile) -> bool:
    """Multi-node replicas meet over an InfiniBand fabric (NCCL), except where the engine's
    descriptor says TCP (llama.cpp: rank 0 reaches the rpc-server workers on their
    management addresses)."""
    return p.nodes > 1 and get(p.engine).multi_node == "fabric"


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
    if node.unreachable:
        return node.unreachable
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
    if key.requires and (why := stack_reason(node.facts, key.requires)):
        return f"{n}: {why}"
    if key.multi_node and not node.fabrics:
        return f"{n}: on no InfiniBand fabric, and a {nodes_wanted}-node profile needs one"
    if key.model_file is not None and not in_model_dirs(key.model_file, node.host.model_dirs):
        dirs = ", ".join(node.host.model_dirs) or "none set"
        return (f"{n}: file://{key.model_file} is outside its llmgw_model_dirs ({dirs}); a file:// source must "
                "lie under one of them")
    return None


def dynamic_fault(fleet: Fleet, node: NodeView, need: Need, *, gpus_checked: bool = False) -> str | None:
    """Which filter `node` fails now ("gpus", "memory", "disk", "port"), or None: cheap, no sentence."""
    # Asked ~200,000 times in a 4,096-host plan: the disk test looks at the free space first
    # (almost always enough) before whether the node holds or is fetching the weights.
    if not gpus_checked and need.gpus > 0 and node.free_count(need.gpu_class) < need.gpus:
        return "gpus"
    mem = node.mem_mb
    if mem is not None and need.memory_mb > 0 and mem - node.mem_reserved_mb < need.memory_mb:
        return "memory"
    if need.size is not None and (free_b := fleet.disk_free(node)) is not None and free_b < need.size \
            and not fleet.holds(node, need.source, need.cache_name) and not fleet.pending_on(node, need.source):
        return "disk"
    if len(node.ports) > fleet.port_span and node.free_port(fleet.ports) is None:
        return "port"
    return None


def fails_now(fleet: Fleet, need: Need, *, gpus_checked: bool = False) -> Callable[[NodeView], bool]:
    """`dynamic_fault(fleet, n, need, gpus_checked=...) is not None` as one closure over the need's
    numbers: the spread indexes ask it of every node a shard lands on, once per index (~140,000
    times when 4,096 hosts take 10,000 replicas), and the attribute look-ups were most of each answer."""
    gpus, gpu_class, mem_need, size = 0 if gpus_checked else need.gpus, need.gpu_class, need.memory_mb, need.size
    source = need.source
    span, ports = fleet.port_span, fleet.ports
    # Fleet.disk_free, holds and pending_on, read straight from the fleet's tables (mutated in
    # place as the plan fills, never replaced).
    disk_free_bytes, pending_bytes, pending = fleet.disk_free_bytes, fleet.pending_bytes, fleet.pending
    holding = fleet.holder_set(source, need.cache_name)

    def fails(n: NodeView) -> bool:
        if gpus > 0:
            free = n.free_counts.get(gpu_class)
            if (n.free_count(gpu_class) if free is None else free) < gpus:
                return True
        mem = n.mem_mb
        if mem is not None and mem_need > 0 and mem - n.mem_reserved_mb < mem_need:
            return True
        if size is not None and (disk := n.disk_key) is not None and n.cache_fs is not None \
                and disk_free_bytes[disk] - pending_bytes.get(disk, 0) < size \
                and n.ordinal not in holding and source not in pending.get(disk, ()):
            return True
        return len(n.ports) > span and n.free_port(ports) is None

    return fails


def dynamic_reason(fleet: Fleet, node: NodeView, need: Need, *, gpus_checked: bool = False) -> str | None:
    """Why `node` cannot take a shard now, given what this plan has taken so far, or None."""
    fault = dynamic_fault(fleet, node, need, gpus_checked=gpus_checked)
    n, p = node.name, need.profile
    if fault == "gpus":
        pool = node.pool(p.gpu_class)
        cls = f"{p.gpu_class} " if p.gpu_class else ""
        sick = "; ".join(pool.why[:2])
        if len(pool.why) > 2:
            sick += f"; {len(pool.why) - 2} more left out"
        return (f"{n}: {node.free_count(p.gpu_class)} of {len(pool.total)} {cls}GPUs free, needs {p.gpus}"
                + (f" ({sick})" if sick else ""))
    if fault == "memory":
        assert node.mem_mb is not None
        avail = node.mem_mb - node.mem_reserved_mb
        return (f"{n}: {fmt_gb(max(avail, 0) / MB_PER_GB)} of {fmt_gb(node.mem_mb / MB_PER_GB)} GB of memory "
                f"unreserved, needs {fmt_gb(p.min_memory_gb)}")
    if fault == "disk":
        fs, free_b = node.cache_fs, fleet.disk_free(node)
        assert fs is not None and free_b is not None and need.size is not None
        where = f"shared {fs.mount}" if fs.shared else fs.mount
        if PurePosixPath(fs.mount) != PurePosixPath(node.host.cache_dir):  # else the same path twice
            where += f" (holding {node.host.cache_dir})"
        return (f"{n}: {fmt_gb(max(free_b, 0) / BYTES_PER_GB)} GB free on {where}, "
                f"weights need {fmt_gb(need.size / BYTES_PER_GB)} GB")
    if fault == "port":
        return f"{n}: every port in {fleet.ports.start}-{fleet.ports.end} is taken"
    return None


def static_ok(node: NodeView, key: StaticKey) -> bool:
    """`static_reason(node, key, ...) is None`, without building any sentence: asked of every
    node once per static key (most pass), where the sentences are wanted only for `llmgw explain`."""
    host = node.host
    if host.node_state != "ready" or node.unreachable:
        return False
    if key.selector:
        labels = host.labels
        for k, v in key.selector:
            if labels.get(k) != v:
                return False
    if key.gpus > 0:
        facts = node.facts
        if facts is None or not facts.gpus or len(node.pool(key.gpu_class).total) < key.gpus:
            return False
    if key.memory_gb > 0 and node.mem_mb is not None and node.mem_mb < key.memory_gb * MB_PER_GB:
        return False
    if key.multi_node and not node.fabrics:
        return False
    if key.requires and stack_reason(node.facts, key.requires) is not None:
        return False
    return key.model_file is None or in_model_dirs(key.model_file, host.model_dirs)


def static_set(fleet: Fleet, need: Need) -> list[NodeView]:
    key = need.key
    members = fleet.static_sets.get(key)
    if members is None:
        members = [n for n in fleet.nodes if static_ok(n, key)]
        fleet.static_sets[key] = members
        fleet.static_members[key] = frozenset(n.ordinal for n in members)
    return members


def _pack(node: NodeView, gpu_class: str | None) -> tuple[bool, int]:
    """Packing preference: partly used nodes first, then the fewest free GPUs (best fit)."""
    return (not node.partly_used, node.free_count(gpu_class))


FAILURE_DOMAIN_VAR = "llmgw_failure_domain"


def failure_domain(node: NodeView) -> str | None:
    """The host's declared failure domain (a room, a power feed...), or None."""
    value = node.host.vars.get(FAILURE_DOMAIN_VAR)
    return None if value is None or value == "" else str(value)


def domain_values(node: NodeView, labels: Sequence[str]) -> tuple[str | None, ...]:
    """The node's value at each level but the leaf (None: not declared, so never crowded)."""
    return (failure_domain(node), *(node.host.labels.get(label) for label in labels))


@dataclass(frozen=True)
class Spread:
    """Where one model's replicas already are, as placement weighs a node for the next one."""

    labels: tuple[str, ...]
    hosts: dict[int, int]  # node ordinal -> replicas (shards) there
    domains: tuple[dict[str, int], ...]  # per level of domain_values: value -> replicas there
    leaves: tuple[frozenset[str], ...]  # the leaf sets of the nodes replicas are on
    # leaf -> which entries of `leaves` hold it, so a node's leaf count looks only at the
    # replicas on its own leaves (not every replica of the model: that was quadratic).
    by_leaf: dict[str, list[int]] = field(default_factory=dict)
    # node ordinal -> its penalty: one placement weighs a node more than once.
    _seen: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def penalty(self, node: NodeView) -> tuple[int, ...]:
        """How crowded `node` is for this model, most important level first; all zero: apart."""
        seen = self._seen.get(node.ordinal)
        if seen is not None:
            return seen
        out = [self.hosts.get(node.ordinal, 0)]
        for value, counts in zip(domain_values(node, self.labels), self.domains, strict=True):
            out.append(0 if value is None else counts.get(value, 0))
        mine = node.leaf_switches()
        # The replicas sharing at least one leaf with the node, each counted once.
        out.append(len({i for leaf in mine for i in self.by_leaf.get(leaf, ())}) if mine else 0)
        self._seen[node.ordinal] = result = tuple(out)
        return result

    @property
    def zero(self) -> tuple[int, ...]:
        return (0,) * (len(self.labels) + 3)


def spread_of(fleet: Fleet, need: Need) -> Spread | None:
    """Where replicas with these weights already are (this plan's and kept ones); None: nowhere."""
    ordinals = fleet.placed.get(need.source)
    if not ordinals:
        return None
    labels = tuple(need.model.spread)
    hosts: dict[int, int] = {}
    domains: tuple[dict[str, int], ...] = tuple({} for _ in range(len(labels) + 1))
    leaves: list[frozenset[str]] = []
    for o in ordinals:
        hosts[o] = hosts.get(o, 0) + 1
        node = fleet.nodes[o]
        for value, counts in zip(domain_values(node, labels), domains, strict=True):
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
        ls = fleet.leaf_set(node)
        if ls:
            leaves.append(ls)
    by_leaf: dict[str, list[int]] = {}
    for i, ls in enumerate(leaves):
        for leaf in ls:
            by_leaf.setdefault(leaf, []).append(i)
    return Spread(labels, hosts, domains, tuple(leaves), by_leaf)


def _choose_single(fleet: Fleet, need: Need, members: list[NodeView]) -> Choice | None:
    if need.gpus > 0:
        # The same order as below (zero penalty first, else the least crowded), kept up to date
        # between placements instead of worked out over every node each time.
        labels = tuple(need.model.spread)
        slot = (need.key, need.source, labels)
        spreads = fleet.table(SPREADS)
        index = spreads.get(slot)
        if index is None:
            def values(n: NodeView) -> tuple[str | None, ...]:
                return domain_values(n, labels)

            groupings = fleet.table(GROUPINGS)
            grouping = groupings.get((need.key, labels))
            if grouping is None:
                grouping = groupings[(need.key, labels)] = Grouping(fleet, members, values, len(labels) + 1)
            index = spreads[slot] = SpreadIndex(
                fleet, members, need.source, need.cache_name, need.gpu_class,
                fails_now(fleet, need), values, len(labels) + 1, grouping)
        best = index.best()
        return None if best is None else Choice((best,))
    # A CPU shard (no GPUs): few enough that looking at the nodes each time is fine.
    spread = spread_of(fleet, need)
    if spread is None:
        return _best_single(fleet, need, members)
    zero = spread.zero
    found = _best_single(fleet, need, members, lambda n: spread.penalty(n) != zero)
    if found is not None:
        return found
    # Nowhere fully apart: the least crowded node that fits, then weights, packing, names.
    holders = {n.ordinal for n in fleet.holders(need.source, need.cache_name)}
    fits = [n for n in members if dynamic_fault(fleet, n, need) is None]
    if not fits:
        return None
    return Choice((min(fits, key=lambda n: (spread.penalty(n), n.ordinal not in holders, bool(n.gpus), n.ordinal)),))


def _best_single(fleet: Fleet, need: Need, members: list[NodeView],
                 skip: Callable[[NodeView], bool] | None = None) -> Choice | None:
    """A CPU shard's node: holders of the weights first, then nodes without GPUs, so GPU nodes
    keep their memory for GPU work."""
    p = need.profile
    # Every filter is monotone within a plan (usage only grows), so a holder that fails once
    # is dropped for good: the list shrinks to the holders that can still take a shard.
    slot = (need.key, need.source)
    holders = fleet.live_holders.get(slot)
    if holders is None:
        inside = fleet.static_members[need.key]
        holders = [n for n in fleet.holders(need.source, need.cache_name) if n.ordinal in inside]
    fits = [n for n in holders if dynamic_fault(fleet, n, need) is None]
    fleet.live_holders[slot] = fits
    if skip is not None:
        fits = [n for n in fits if not skip(n)]
    if fits:
        return Choice((min(fits, key=lambda n: (*_pack(n, p.gpu_class), n.ordinal)),))
    for n in sorted(members, key=lambda n: (bool(n.gpus), n.ordinal)):
        if (skip is None or not skip(n)) and dynamic_fault(fleet, n, need) is None:
            return Choice((n,))
    return None


def _by_fabric(nodes: list[NodeView]) -> dict[str, list[NodeView]]:
    groups: dict[str, list[NodeView]] = {}
    for n in nodes:
        for f in n.fabrics:
            groups.setdefault(f, []).append(n)
    return groups


def _multi_prefs(fleet: Fleet, need: Need, fabric: str) -> MultiPrefs:
    # Made once per weights, GPU class and fabric (they read nothing else): a leaf group's
    # candidate is worked out ~8 times per multi-node replica, and made them each time.
    slot = (need.source, need.gpu_class, fabric)
    found = fleet.multi_prefs.get(slot)
    if found is not None:
        return found
    holders = fleet.holder_set(need.source, need.cache_name)
    gpu_class = need.gpu_class

    def pref(n: NodeView) -> tuple[bool, bool, bool, int, int]:
        """One node: clean cables, holding the weights, partly used, fewest free, name."""
        return (n.degraded.get(fabric, False), n.ordinal not in holders, *_pack(n, gpu_class), n.ordinal)

    def cheap(c: Sequence[NodeView]) -> SetScore:
        """A set: degraded cables, weights held, whole nodes broken into, GPUs left, names."""
        degraded = held = whole = free = 0
        for n in c:  # one pass, not four sums: a set is scored each time its group changes
            degraded += n.degraded.get(fabric, False)
            held += n.ordinal in holders
            whole += not n.partly_used
            free += n.free_count(gpu_class)
        return (degraded, -held, whole, free, sorted([n.ordinal for n in c]))

    found = fleet.multi_prefs[slot] = (pref, cheap)
    return found


def _group_candidate(fleet: Fleet, need: Need, groups: LeafGroups, gid: GroupId) -> Candidate | None:
    """A leaf group's best set for `need`, cached until one of its nodes is touched."""
    source = need.source
    per_source = groups.cache.get(gid)
    if per_source is None:
        per_source = groups.cache[gid] = {}
    elif source in per_source:
        return per_source[source]
    pref, cheap = _multi_prefs(fleet, need, groups.keys[gid][0])
    fails = groups.fails.get(source)
    if fails is None:  # what it reads of the need is the same for every need of this key and weights
        fails = groups.fails[source] = fails_now(fleet, need, gpus_checked=True)
    want = need.profile.nodes
    # The first `want` nodes in preference order that pass the filters: the same set as the
    # `want` best of those that pass (preferences differ: the name breaks ties), with the
    # filters asked of a few nodes, not of the whole group.
    picked: list[NodeView] = []
    members = groups.members[gid]
    orders = groups.orders.get(gid)
    if orders is None:
        orders = groups.orders[gid] = {}
    # Holding the weights is the only part of the order that differs between sources, so every
    # source holding them on none of the group's nodes (most sources, in most groups) shares one.
    slot = None if fleet.holder_set(source, need.cache_name).isdisjoint(members) else source
    order = orders.get(slot)
    if order is None:
        nodes = fleet.nodes
        order = orders[slot] = sorted([nodes[o] for o in members], key=pref)
    elif len(order) > len(members):
        # Nodes that left the group never come back (usage only grows): drop them from the order
        # instead of stepping over them on every walk (the order of the rest is unchanged).
        order = orders[slot] = [n for n in order if n.ordinal in members]
    if want > 0:
        for n in order:
            if n.ordinal in members and not fails(n):
                picked.append(n)
                if len(picked) == want:
                    break
    found: Candidate | None = None
    if len(picked) == want:
        cand = tuple(picked)
        found = (cheap(cand), cand)
    per_source[source] = found
    return found


def _protocol_score(fleet: Fleet, fabric: str, cand: Sequence[NodeView], cheap: SetScore) -> tuple[object, ...]:
    # The fabric's answer for a set never changes within a plan; a group's candidate set is
    # scored again each time it is among the best few (several times per replica).
    key = (fabric, tuple(n.ordinal for n in cand))
    checks = fleet.fabric_checks.get(key)
    if checks is None:
        names = [n.name for n in cand]
        checks = fleet.fabric_checks[key] = (not fleet.fabric_index.share_leaf(names, fabric),
                                             not fleet.fabric_index.rails_aligned(names, fabric))
    return (*checks, *cheap, fabric)


def _best_groups(fleet: Fleet, need: Need, groups: LeafGroups, k: int) -> list[RankedGroup]:
    """The `k` leaf groups with the best candidate sets for `need`, best first, by (score, fabric).

    A heap per source holds every group's candidate; only the groups touched since the last
    call are scored again (`LeafGroups.changes`), and entries whose candidate is no longer the
    cached one are stale and dropped when they surface. Scanning every group for every
    replica made a plan grow with the square of the fleet."""
    want = need.profile.nodes
    ranked = groups.ranked.get(need.source)
    if ranked is None:
        heap: list[RankedGroup] = []
        todo: Iterable[GroupId] = list(groups.members)
    else:
        heap, seen = ranked
        todo = dict.fromkeys(groups.changes[seen:])
    keys = groups.keys
    for gid in todo:
        fabric, signature = keys[gid]
        if not signature or len(groups.members[gid]) < want:
            continue
        if need.source in groups.cache.get(gid, {}):
            continue  # its candidate did not change (LeafGroups.touched): already in the heap, or None
        found = _group_candidate(fleet, need, groups, gid)
        if found is not None:
            groups.pushed += 1
            heapq.heappush(heap, (found[0], fabric, groups.pushed, gid, found))
    groups.ranked[need.source] = (heap, len(groups.changes))
    top: list[RankedGroup] = []
    while heap and len(top) < k:
        entry = heapq.heappop(heap)
        if groups.cache.get(entry[3], {}).get(need.source) is entry[4]:
            top.append(entry)  # still the group's current candidate
    for entry in top:
        heapq.heappush(heap, entry)
    return top


def _choose_multi(fleet: Fleet, need: Need, members: list[NodeView]) -> Choice | None:
    """`nodes` whole nodes on one fabric: one leaf, aligned rails and clean cables first.

    Candidates are the best few leaf groups (nodes with identical adapter->leaf maps) and,
    only when no group is a clean one-leaf rail-aligned set, the best nodes of each fabric
    regardless of leaf. The fabric index has the last word on leaves and rails.
    """
    want = need.profile.nodes
    groups = fleet.leaf_groups(need.key, members)
    best: tuple[tuple[object, ...], Choice] | None = None
    for cheap, fabric, _n, _gid, (_, cand) in _best_groups(fleet, need, groups, 3):
        score = _protocol_score(fleet, fabric, cand, cheap)
        if best is None or score < best[0]:
            best = (score, Choice(tuple(sorted(cand, key=lambda n: n.ordinal)), fabric))
    if best is not None and best[0][:2] == (False, False):
        return best[1]
    # No clean one-leaf set: the best nodes per fabric, whatever their leaves (every node, once).
    by_fabric: dict[str, set[int]] = {}
    for gid, ordinals in groups.members.items():
        by_fabric.setdefault(groups.keys[gid][0], set()).update(ordinals)
    for fabric, ordinals in sorted(by_fabric.items()):
        if len(ordinals) < want:
            continue
        pref, cheap_of = _multi_prefs(fleet, need, fabric)
        fits = [fleet.nodes[o] for o in sorted(ordinals)]
        fits = [n for n in fits if dynamic_fault(fleet, n, need, gpus_checked=True) is None]
        if len(fits) < want:
            continue
        cand = tuple(heapq.nsmallest(want, fits, key=pref))
        score = _protocol_score(fleet, fabric, cand, cheap_of(cand))
        if best is None or score < best[0]:
            best = (score, Choice(tuple(sorted(cand, key=lambda n: n.ordinal)), fabric))
    return None if best is None else best[1]


def _choose_spread(fleet: Fleet, need: Need, members: list[NodeView]) -> Choice | None:
    """`nodes` distinct nodes joined by the management network (llama.cpp RPC): holders of
    the weights first, then packing as for one node, then name order."""
    p = need.profile
    holders = {n.ordinal for n in fleet.holders(need.source, need.cache_name)}
    fits = [n for n in members if dynamic_fault(fleet, n, need) is None]
    if len(fits) < p.nodes:
        return None
    cand = heapq.nsmallest(p.nodes, fits, key=lambda n: (n.ordinal not in holders, *_pack(n, p.gpu_class),
                                                         n.ordinal))
    return Choice(tuple(sorted(cand, key=lambda n: n.ordinal)))


def choose(fleet: Fleet, need: Need) -> Choice | None:
    """The best place for one replica of `need.profile`, or None when nothing passes every filter."""
    members = static_set(fleet, need)
    if not members:
        return None
    if need.profile.nodes > 1:
        if not need.key.multi_node:
            return _choose_spread(fleet, need, members)
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
    if need.profile.nodes > 1 and not key.multi_node and len(fits) < need.profile.nodes:
        out.append(Verdict(None, None, f"{_plural(len(fits), 'node')} can take a shard, "
                                       f"a {need.profile.nodes}-node replica needs {need.profile.nodes}"))
    if key.multi_node:
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
