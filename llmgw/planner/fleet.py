"""The fleet as placement sees it: per node what it has (static) and what is taken (dynamic).

Static facts (GPUs, memory, filesystems, fabrics) are read once. Usage (GPUs, memory,
ports, weights on the way to a filesystem) only grows while a plan is made: replicas
are created before old ones are destroyed, so nothing freed in this plan is reused.
That monotonicity is what lets the leaf groups below (and the spread indexes) stay cheap and correct.

Why long: the node views, the leaf groups and the fleet's accounting all
change together on each `take`; apart, each would need the others' internals.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Generic, TypeVar, cast

from llmgw.facts import Filesystem, Gpu, HostFacts, Weights
from llmgw.gpus import gpu_left_out
from llmgw.inventory import Host
from llmgw.planner.inputs import FabricIndex
from llmgw.site import PortRange
from llmgw.stack import Requirement
from llmgw.weights.present import copy_keys, is_copy, servable_path, source_keys
from llmgw.weights.shared import cache_filesystem, declared_dir

MB_PER_GB = 1024
BYTES_PER_GB = 1024**3


def fmt_gb(value: float) -> str:
    """A size in GB as an operator reads it: `8`, `7.8`, `0.5`."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass(slots=True)
class GpuPool:
    """The GPUs of one class on a node (all classes when the class is None). Read only (not
    frozen: a frozen dataclass sets each field through object.__setattr__, and one is made per node)."""

    total: tuple[int, ...]
    healthy: tuple[int, ...]  # placeable: healthy, not cordoned, and of known health unless the host allows unknown
    unhealthy: tuple[Gpu, ...]
    why: tuple[str, ...] = ()  # per GPU of `unhealthy`: why it is left out, "GPU 2 unhealthy: ..."


@dataclass
class NodeView:
    """One inventory node: its facts, distilled, and what this plan has taken of it."""

    name: str
    ordinal: int  # position in name order: the deterministic tie-break everywhere
    host: Host
    facts: HostFacts | None
    mem_mb: int | None
    cache_fs: Filesystem | None
    disk_key: str | None
    cache_names: frozenset[str]
    # The operator's copies it could serve in place (llmgw.weights.present): under its model
    # dirs, in a shape a shard entry may carry.
    copies: tuple[Weights, ...]
    fabrics: tuple[str, ...]
    leaves: dict[str, tuple[tuple[str, str], ...]]
    degraded: dict[str, bool]
    # Why it takes nothing new though the inventory says ready: it stopped answering
    # (llmgw.nodetime; set by the reconciler, which knows the clock).
    unreachable: str | None = None
    used: set[int] = field(default_factory=set)
    mem_reserved_mb: float = 0.0
    ports: set[int] = field(default_factory=set)
    _pools: dict[str | None, GpuPool] = field(default_factory=dict, repr=False)
    free_counts: dict[str | None, int] = field(default_factory=dict, repr=False)  # free_count's, per class

    @property
    def gpus(self) -> list[Gpu] | None:
        return None if self.facts is None else self.facts.gpus

    def pool(self, gpu_class: str | None) -> GpuPool:
        cached = self._pools.get(gpu_class)
        if cached is None:
            every = self.gpus or []
            if gpu_class is not None:
                for g in every:
                    if g.gpu_class != gpu_class:
                        break
                else:  # one class on the node (the usual case): the same pool as all classes', built once
                    cached = self._pools[gpu_class] = self.pool(None)
                    return cached
            gpus = every if gpu_class is None else [g for g in every if g.gpu_class == gpu_class]
            indexes = [g.index for g in gpus]
            if indexes != sorted(indexes):  # facts list GPUs by index: sort only when they do not
                gpus = sorted(gpus, key=_by_index)
                indexes = [g.index for g in gpus]
            total = tuple(indexes)
            host = self.host
            fm = self.facts.fabric_manager if self.facts is not None else None
            left_out = [(g, why) for g in gpus if (why := gpu_left_out(g, host, fm)) is not None]
            out = {g.index for g, _ in left_out}
            cached = GpuPool(total, total if not left_out else tuple([i for i in indexes if i not in out]),
                             tuple(g for g, _ in left_out), tuple(why for _, why in left_out))
            self._pools[gpu_class] = cached
        return cached

    def free(self, gpu_class: str | None) -> list[int]:
        return [i for i in self.pool(gpu_class).healthy if i not in self.used]

    def free_count(self, gpu_class: str | None) -> int:
        cached = self.free_counts.get(gpu_class)
        if cached is None:
            healthy = self.pool(gpu_class).healthy
            used = self.used
            cached = len(healthy) - sum(1 for i in healthy if i in used) if used else len(healthy)
            self.free_counts[gpu_class] = cached
        return cached

    def use(self, gpus: Iterable[int]) -> None:
        self.used.update(gpus)
        self.free_counts.clear()

    @property
    def partly_used(self) -> bool:
        return bool(self.used)

    def free_port(self, ports: PortRange) -> int | None:
        for p in range(ports.start, ports.end + 1):
            if p not in self.ports:
                return p
        return None

    def leaf_switches(self) -> frozenset[str]:
        """Every leaf switch the node's adapters hang off, on any fabric (`Fleet.leaf_set`
        caches it per node)."""
        return frozenset(leaf for pairs in self.leaves.values() for _adapter, leaf in pairs)


_by_index = attrgetter("index")
_by_path = attrgetter("path")
_NONE: frozenset[str] = frozenset()


def model_file(source: str) -> str | None:
    """The path a file:// source names, `..` folded as the host's check folds it (weights module
    `local_path`, which also follows links: a path that passes here may still be refused there)."""
    return posixpath.normpath(source[len("file://"):]) if source.startswith("file://") else None


def in_model_dirs(path: str, dirs: Sequence[str]) -> bool:
    """Whether `path` (normalised) lies strictly under one of `dirs` (a folder that is not `/`)."""
    for d in dirs:
        root = posixpath.normpath(d).rstrip("/")
        if root and path.startswith(root + "/"):
            return True
    return False


def node_view(ordinal: int, host: Host, facts: HostFacts | None, fabrics: FabricIndex) -> NodeView:
    fs = cache_filesystem(host, facts)
    # A shared filesystem is one pool however many nodes mount it: weights fetched onto it
    # once serve them all, and its free space is spent once.
    # A folder the inventory declares shared (llmgw_shared_dirs) counts the same way.
    declared = declared_dir(host)
    disk_key = None if fs is None else (f"shared:{fs.device}" if fs.shared else
                                        f"shared:declared:{declared}" if declared else f"{host.name}:{fs.mount}")
    weights = (facts.weights if facts else None) or []
    copies: tuple[Weights, ...] = ()
    if not weights:  # most hosts hold none: empty sets built per host were an eighth of the fleet's views
        cache_names = _NONE
    else:
        cache_names = frozenset(w.cache_name for w in weights if w.cache and w.cache_name)
        copies = tuple(sorted((w for w in weights if not w.cache and servable_path(w.path, host.model_dirs)),
                              key=_by_path))
    fabric_ids = tuple(sorted(fabrics.fabrics_of(host.name)))
    return NodeView(
        name=host.name, ordinal=ordinal, host=host, facts=facts,
        mem_mb=facts.memory_total_mb if facts else None, cache_fs=fs, disk_key=disk_key,
        cache_names=cache_names, copies=copies,
        fabrics=fabric_ids,
        leaves={f: tuple(sorted(fabrics.leaves_of(host.name, f).items())) for f in fabric_ids},
        degraded={f: fabrics.has_degraded_link(host.name, f) for f in fabric_ids},
    )


@dataclass(frozen=True)
class StaticKey:
    """What a profile asks of a node that no placement in this plan can change."""

    gpu_class: str | None
    selector: tuple[tuple[str, str], ...]
    gpus: int
    memory_gb: float
    multi_node: bool
    # A file:// source's path (`model_file`): only nodes listing a folder above it in
    # llmgw_model_dirs can serve it, as the host's weights module refuses any other path.
    model_file: str | None = None
    # The host stack: the profile's `requires:` and its engine's GPU build's (llmgw.stack.requirements).
    requires: tuple[Requirement, ...] = ()


GroupKey = tuple[str, tuple[tuple[str, str], ...]]  # fabric, adapter->leaf signature ((): no leaves known)
GroupId = int  # a group's position in LeafGroups.keys: a group is looked up ~20 times per candidate, and
# hashing its key (a tuple of every adapter->leaf pair) each time was a tenth of the multi-node work
SetScore = tuple[int, int, int, int, list[int]]
Candidate = tuple[SetScore, tuple["NodeView", ...]]  # a group's best set for one source, and its score
RankedGroup = tuple[SetScore, str, int, GroupId, Candidate]  # score, fabric, push order, group, its candidate
# A multi-node profile's preferences on one fabric: a node's rank, and a candidate set's score (placement._multi_prefs)
MultiPrefs = tuple[Callable[["NodeView"], tuple[bool, bool, bool, int, int]],
                   Callable[[Sequence["NodeView"]], SetScore]]


class LeafGroups:
    """For a multi-node StaticKey: per fabric, nodes with identical adapter->leaf maps, with
    enough free GPUs for one shard. Such a group shares its leaves and its rails line up.

    A node leaves its groups once its free GPUs drop below a shard's need, and never comes
    back (usage only grows). Each group's best candidate set is cached and recomputed only
    when one of its nodes was touched, so a placement costs the number of groups, not nodes.
    """

    def __init__(self, key: StaticKey, nodes: list[NodeView]) -> None:
        self.key = key
        self.keys: list[GroupKey] = []  # per group id: (fabric, signature)
        self.members: dict[GroupId, set[int]] = {}  # in order of ids: first member's name order
        self.of: dict[int, list[GroupId]] = {}
        self.cache: dict[GroupId, dict[str, Candidate | None]] = {}
        # Per group and source: its members in preference order when last sorted. Still in order
        # while every node touched since has left the group (the others' preferences did not
        # change), so a group's next candidate is a walk down it, not another sort.
        self.orders: dict[GroupId, dict[str | None, list[NodeView]]] = {}  # None: sources held on none
        # Every group whose cached candidates were dropped, in order: a source's ranking of the
        # groups (placement._choose_multi) recomputes only these, not every group per replica.
        self.changes: list[GroupId] = []
        self.ranked: dict[str, tuple[list[RankedGroup], int]] = {}
        self.fails: dict[str, Callable[[NodeView], bool]] = {}  # per source: placement.fails_now, GPUs checked
        self.pushed = 0  # ties in a ranking are broken by push order, never by comparing nodes
        ids: dict[GroupKey, GroupId] = {}
        for n in nodes:
            if n.free_count(key.gpu_class) < key.gpus:
                continue
            for f in n.fabrics:
                gkey = (f, n.leaves.get(f, ()))
                gid = ids.get(gkey)
                if gid is None:
                    gid = ids[gkey] = len(self.keys)
                    self.keys.append(gkey)
                    self.members[gid] = set()
                self.members[gid].add(n.ordinal)
                self.of.setdefault(n.ordinal, []).append(gid)

    def touched(self, node: NodeView) -> None:
        gids = self.of.get(node.ordinal, [])
        leaves = node.free_count(self.key.gpu_class) < self.key.gpus
        for gid in gids:
            # A group with too few fitting nodes stays so (usage only grows): keep those answers.
            # A node that leaves the group changes only the candidates it was in: every other
            # node of the group is as it was, so each other best set still is (most shards land
            # on nodes outside a source's candidates; recomputing them was half the multi-node work).
            per_source = self.cache.get(gid)
            if per_source:
                self.cache[gid] = {src: cand for src, cand in per_source.items()
                                   if cand is None or (leaves and node not in cand[1])}
        self.changes.extend(gids)
        if not leaves:  # still a member, and its preference changed: sort again
            for gid in gids:
                self.orders.pop(gid, None)
        else:
            for gid in gids:
                self.members[gid].discard(node.ordinal)
            self.of.pop(node.ordinal, None)

    def invalidate(self) -> None:
        for gid, per_source in self.cache.items():
            self.cache[gid] = {src: None for src, cand in per_source.items() if cand is None}
        self.changes.extend(self.cache)


K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, eq=False)
class PlanTable(Generic[K, V]):
    """The name of a table of things built over one fleet for one plan (keys K, values V), such as
    llmgw.planner.spreading's indexes: the fleet keeps them (`Fleet.table`) and drops them on
    release() without knowing their types, so fleet.py imports nothing of what is built on it."""

    name: str


class Fleet:
    """Every node, plus the shared accounting: weights on their way to each filesystem."""

    def __init__(self, hosts: Mapping[str, Host], facts: Mapping[str, HostFacts], fabrics: FabricIndex,
                 ports: PortRange, weight_sizes: Mapping[str, int | None] | None = None,
                 weight_files: Mapping[str, Mapping[str, int | None]] | None = None) -> None:
        self.ports = ports
        # What an operator's copy is checked against (llmgw.weights.present.is_copy).
        self.weight_sizes = weight_sizes or {}
        self.weight_files = weight_files or {}
        self.port_span = ports.end - ports.start  # a node with more ports taken than this has none left
        self.fabric_index = fabrics
        self.nodes = [node_view(i, hosts[name], facts.get(name), fabrics) for i, name in enumerate(sorted(hosts))]
        self.by_name = {n.name: n for n in self.nodes}
        # A shared filesystem is reported by every node that mounts it, each at its own
        # gathering time: its free space is the least any of them saw, so a newer, fuller
        # report is never overruled by an older, emptier one.
        self.disk_free_bytes: dict[str, int] = {}
        for n in self.nodes:
            if n.cache_fs is not None and n.disk_key is not None:
                seen = self.disk_free_bytes.get(n.disk_key)
                free = n.cache_fs.free_bytes
                self.disk_free_bytes[n.disk_key] = free if seen is None else min(seen, free)
        self.pending: dict[str, set[str]] = {}  # disk key -> sources coming onto it in this plan
        self.pending_bytes: dict[str, int] = {}
        self.static_sets: dict[StaticKey, list[NodeView]] = {}
        self.static_members: dict[StaticKey, frozenset[int]] = {}
        self.groups: dict[StaticKey, LeafGroups] = {}
        self.member_of: dict[int, list[LeafGroups]] = {}
        self._holders: dict[str, list[NodeView]] = {}
        self._holder_set: dict[str, frozenset[int]] = {}
        self._held: dict[tuple[str, str], list[int]] | None = None
        self._copies: dict[tuple[str, str], list[tuple[int, Weights]]] | None = None
        self._copy_of: dict[str, dict[int, str]] = {}  # source -> node ordinal -> the copy served there
        self.live_holders: dict[tuple[StaticKey, str], list[NodeView]] = {}
        # source -> ordinals of the nodes its replicas' shards are on (one entry per shard),
        # for spreading a model's replicas. Nodes being drained are left out: what runs
        # there is on its way elsewhere.
        self.placed: dict[str, list[int]] = {}
        # Every node a shard was put on, in order, for indexes that catch up when next used.
        self.touches: list[int] = []
        self._tables: dict[PlanTable[Any, Any], dict[Any, Any]] = {}  # what table() hands out
        self._leaf_sets: dict[int, frozenset[str]] = {}
        # (fabric, node ordinals) -> (not on one leaf, rails not aligned): the fabric index's answers
        self.fabric_checks: dict[tuple[str, tuple[int, ...]], tuple[bool, bool]] = {}
        self.multi_prefs: dict[tuple[str, str | None, str], MultiPrefs] = {}  # (source, GPU class, fabric)

    def table(self, which: PlanTable[K, V]) -> dict[K, V]:
        """The fleet's table `which` (empty at first), kept until release()."""
        found = self._tables.get(which)
        if found is None:
            found = self._tables[which] = {}
        return cast(dict[K, V], found)

    def release(self) -> None:
        """Drop the spread indexes (every table) once the plan is made: each refers back to the fleet, and that
        cycle left the whole fleet (every node view, ~250,000 objects at 4,096 hosts) to the cyclic
        collector, a 0.6 s pass at the end of `llmgw plan`; without it reference counting frees them.
        The leaf groups' filters (`LeafGroups.fails`) refer back to it too."""
        self._tables.clear()
        for lg in self.groups.values():
            lg.fails.clear()

    def leaf_set(self, node: NodeView) -> frozenset[str]:
        """Every leaf switch the node's adapters hang off, on any fabric."""
        found = self._leaf_sets.get(node.ordinal)
        if found is None:
            found = node.leaf_switches()
            self._leaf_sets[node.ordinal] = found
        return found

    def holders(self, source: str, name: str) -> list[NodeView]:
        """Nodes already holding `source`'s weights (facts only), in name order: llmgw's cache
        entry `name`, or an operator's copy it serves in place (`copy_at`). Exactly the nodes
        where apply downloads nothing for it: the disk filter skips these and no other."""
        found = self._holders.get(source)
        if found is None:
            ordinals = {*self._held_index().get(("cache", name), ()), *self._copies_of(source)}
            found = [self.nodes[o] for o in sorted(ordinals)]
            self._holders[source] = found
            self._holder_set[source] = frozenset(n.ordinal for n in found)
        return found

    def copy_at(self, node: NodeView, source: str, name: str) -> str | None:
        """The operator's copy of `source` a shard on `node` serves in place, or None (llmgw's
        own cache entry, when the node has one, is served as before: it is llmgw's to manage)."""
        if name in node.cache_names:
            return None
        return self._copies_of(source).get(node.ordinal)

    def _copies_of(self, source: str) -> dict[int, str]:
        """Node ordinal -> the path of the first whole copy of `source` there (path order)."""
        found = self._copy_of.get(source)
        if found is None:
            if self._copies is None:  # built once: every node's copies under every key they answer to
                self._copies = {}
                for n in self.nodes:
                    for w in n.copies:
                        for key in copy_keys(w.path):
                            self._copies.setdefault(key, []).append((n.ordinal, w))
            size, files = self.weight_sizes.get(source), self.weight_files.get(source)
            found = {}
            for key in source_keys(source):
                for o, w in self._copies.get(key, ()):
                    if o not in found and is_copy(w, source, size, files):
                        found[o] = w.path
            self._copy_of[source] = found
        return found

    def _held_index(self) -> dict[tuple[str, str], list[int]]:
        """("cache", name) -> the nodes holding that cache entry, built once: asking every node
        about every source was 82,000 calls for a 4,096-host plan."""
        if self._held is None:
            self._held = {}
            for n in self.nodes:
                for value in n.cache_names:
                    self._held.setdefault(("cache", value), []).append(n.ordinal)
        return self._held

    def holder_set(self, source: str, name: str) -> frozenset[int]:
        """The ordinals of `holders(source, name)`."""
        found = self._holder_set.get(source)
        if found is None:
            self.holders(source, name)
            found = self._holder_set[source]
        return found

    def holds(self, node: NodeView, source: str, name: str) -> bool:
        return node.ordinal in self.holder_set(source, name)

    def _track(self, members: list[NodeView], index: LeafGroups) -> None:
        for n in members:
            self.member_of.setdefault(n.ordinal, []).append(index)

    def leaf_groups(self, key: StaticKey, members: list[NodeView]) -> LeafGroups:
        lg = self.groups.get(key)
        if lg is None:
            lg = LeafGroups(key, members)
            self.groups[key] = lg
            self._track(members, lg)
        return lg

    def pending_on(self, node: NodeView, source: str) -> bool:
        return node.disk_key is not None and source in self.pending.get(node.disk_key, ())

    def disk_free(self, node: NodeView) -> int | None:
        if node.cache_fs is None or node.disk_key is None:
            return None
        return self.disk_free_bytes[node.disk_key] - self.pending_bytes.get(node.disk_key, 0)

    def take(self, node: NodeView, gpus: Iterable[int], memory_gb: float, port: int | None,
             source: str | None, name: str, size: int | None) -> None:
        """Record that a shard uses these GPUs, memory, port and (unless present) disk for its weights."""
        node.use(gpus)
        self.touches.append(node.ordinal)
        node.mem_reserved_mb += memory_gb * MB_PER_GB
        if source is not None and node.host.node_state != "draining":
            self.placed.setdefault(source, []).append(node.ordinal)
        if port is not None:
            node.ports.add(port)
        if source is not None and node.disk_key is not None and not self.holds(node, source, name):
            coming = self.pending.setdefault(node.disk_key, set())
            if source not in coming:
                coming.add(source)
                self.pending_bytes[node.disk_key] = self.pending_bytes.get(node.disk_key, 0) + (size or 0)
                if node.disk_key.startswith("shared:"):
                    for lg in self.groups.values():  # other nodes' disk changed too
                        lg.invalidate()
        for idx in self.member_of.get(node.ordinal, ()):
            idx.touched(node)
