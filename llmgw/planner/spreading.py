"""The best node for one more single-node GPU replica of a model, spread apart, without
looking at every node each time.

Placement's order for such a replica is, over every node that passes the filters:
(replicas of the model on the node, replicas in each of its failure domains, replicas
sharing one of its leaf switches, not holding the weights, not partly used, free GPUs,
name). Scanning every node for every replica made a plan grow with the square of the
fleet. Here nodes are grouped by what the middle of that key depends on (their domain
values and leaf set), so a group has one crowding count; inside a group the best node is
the top of a heap keyed by the rest. A placement changes one node and the counts of the
groups it crowds, so only those are worked out again; the best group is the top of a heap
of groups. Stale heap entries are skipped when they come up (their key no longer matches).

It relies on what the planner relies on elsewhere: within a plan usage only grows, so a
node that fails a filter fails it for the rest of the plan, and a node's key only changes
when a shard lands on it (which the fleet records in `Fleet.touches`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from llmgw.planner.fleet import Fleet, NodeView, PlanTable, StaticKey

# Keys are tuples of small counts packed into one int, most significant first, each field
# FIELD bits wide: ordered as the tuples are (no count comes near 2**32), and a heap of
# ints compares each pair in one step where tuples went field by field (a fifth of a
# 4,096-host plan). A node's key: (replicas here, not holding, not partly used, free GPUs,
# ordinal); a group's: (replicas here, each level's crowding, leaf crowding, then the
# rest of its best node's key).
FIELD = 32
MASK = (1 << FIELD) - 1
REST = 4 * FIELD  # the node key's fields after `replicas here`, its ordinal last
REST_MASK = (1 << REST) - 1
NodeKey = int


class Grouping:
    """Nodes with the same domain values and leaf set share every count but their own: their
    groups. They depend on the members and the levels only, so every model of one static key
    and spread labels shares them (built once, read only)."""

    def __init__(self, fleet: Fleet, members: list[NodeView], values: Callable[[NodeView], tuple[str | None, ...]],
                 levels: int) -> None:
        self.group_of: dict[int, int] = {}
        self.values: list[tuple[str | None, ...]] = []
        self.by_value: tuple[dict[str, list[int]], ...] = tuple({} for _ in range(levels))
        self.by_leaf: dict[str, list[int]] = {}
        # node ordinal -> the groups sharing a leaf with it, worked out when a shard first lands there
        self.crowds: dict[int, frozenset[int]] = {}
        ids: dict[tuple[tuple[str | None, ...], frozenset[str]], int] = {}
        for n in members:
            vals = values(n)
            leaves = fleet.leaf_set(n)
            gid = ids.get((vals, leaves))
            if gid is None:
                gid = ids[(vals, leaves)] = len(self.values)
                self.values.append(vals)
                for level, value in enumerate(vals):
                    if value is not None:
                        self.by_value[level].setdefault(value, []).append(gid)
                for leaf in leaves:
                    self.by_leaf.setdefault(leaf, []).append(gid)
            self.group_of[n.ordinal] = gid


class SpreadIndex:
    """For one (static key, weights source, spread labels): the best node to place on next."""

    def __init__(self, fleet: Fleet, members: list[NodeView], source: str, cache_name: str, gpu_class: str | None,
                 fails: Callable[[NodeView], bool], values: Callable[[NodeView], tuple[str | None, ...]],
                 levels: int, grouping: Grouping) -> None:
        """`fails`: whether a node fails a filter now; `values`: its failure-domain value per level;
        `grouping`: the members' groups by those values (`Grouping.of`)."""
        self.fleet, self.source, self.cache_name, self.gpu_class = fleet, source, cache_name, gpu_class
        self.fails, self.values, self.levels = fails, values, levels
        self.holding = fleet.holder_set(source, cache_name)  # asked for every key: a set, not a call
        self.seen = 0  # entries of fleet.placed[source] counted so far
        self.touch_seen = len(fleet.touches)
        self.hosts: dict[int, int] = {}
        self.domains: tuple[dict[str, int], ...] = tuple({} for _ in range(self.levels))
        self.grouping = grouping
        self.group_of, self.group_values = grouping.group_of, grouping.values
        self.by_value, self.by_leaf = grouping.by_value, grouping.by_leaf
        self.leaf_count = [0] * len(self.group_values)  # placed shards sharing a leaf with the group
        self.node_key: dict[int, NodeKey | None] = {}
        self.heaps: list[list[NodeKey]] = [[] for _ in self.group_values]
        self.group_key: list[int | None] = [None] * len(self.group_values)
        self.top: list[int] = []  # group keys; the ordinal in each names its node, so its group
        hosts, holding = self.hosts, self.holding

        def key_of(n: NodeView) -> NodeKey:
            """The node's own part of the order; whether it passes the filters is asked only of a
            group's top (`_settle`): a node that fails stays failed for the rest of the plan.
            A closure, not a method: ~100,000 keys for 10,000 replicas, and `self.` look-ups were a third."""
            o = n.ordinal
            free = n.free_counts.get(gpu_class)
            if free is None:
                free = n.free_count(gpu_class)
            return ((((hosts.get(o, 0) << FIELD | (o not in holding)) << FIELD | (not n.used)) << FIELD
                     | free) << FIELD | o)

        self.key_of = key_of
        self._count_placed()
        node_key, heaps, group_of = self.node_key, self.heaps, self.group_of
        for n in members:
            key = key_of(n)
            node_key[n.ordinal] = key
            heaps[group_of[n.ordinal]].append(key)
        for gid, heap in enumerate(heaps):
            heapq.heapify(heap)
            self._settle(gid)

    def _count_placed(self) -> set[int]:
        """Count the shards placed since last time; the groups whose crowding changed."""
        placed = self.fleet.placed.get(self.source, [])
        changed: set[int] = set()
        group_of, crowds = self.group_of, self.grouping.crowds
        for o in placed[self.seen:]:
            self.hosts[o] = self.hosts.get(o, 0) + 1
            node = self.fleet.nodes[o]
            own = group_of.get(o)  # a member's values are its group's; a shard may be on another node
            for level, value in enumerate(self.values(node) if own is None else self.group_values[own]):
                if value is not None:
                    counts = self.domains[level]
                    counts[value] = counts.get(value, 0) + 1
                    changed.update(self.by_value[level].get(value, ()))
            crowded = crowds.get(o)
            if crowded is None:
                crowded = crowds[o] = frozenset(gid for leaf in self.fleet.leaf_set(node)
                                                for gid in self.by_leaf.get(leaf, ()))
            for gid in crowded:
                self.leaf_count[gid] += 1
            changed |= crowded
        self.seen = len(placed)
        return changed

    def _settle(self, gid: int) -> None:
        """Drop stale entries off the group's heap and (re)enter the group with its best key."""
        heap, node_key, nodes, fails = self.heaps[gid], self.node_key, self.fleet.nodes, self.fails
        while heap:
            top = heap[0]
            o = top & MASK
            if node_key[o] != top:
                heapq.heappop(heap)  # stale: the node's key changed since
            elif fails(nodes[o]):
                node_key[o] = None
                heapq.heappop(heap)
            else:
                break
        if not heap:
            self.group_key[gid] = None
            return
        best = heap[0]
        key = best >> REST  # replicas here
        for v, counts in zip(self.group_values[gid], self.domains, strict=True):
            key = key << FIELD | (0 if v is None else counts.get(v, 0))
        key = (key << FIELD | self.leaf_count[gid]) << REST | (best & REST_MASK)
        if key != self.group_key[gid]:
            self.group_key[gid] = key
            heapq.heappush(self.top, key)

    def _moves_best(self, gid: int, o: int, key: NodeKey | None) -> bool:
        """Whether node `o`'s new key (None: failing) may change its group's best node: only when
        it was the best or now beats it; else the group's key stands and is not worked out again
        (an eighth of the groups a 4,096-host plan settled)."""
        gkey = self.group_key[gid]
        if gkey is None or gkey & MASK == o:
            return True
        best = self.node_key.get(gkey & MASK)
        return best is None or (key is not None and key < best)

    def best(self) -> NodeView | None:
        """The node placement's order puts first now, or None when no member passes the filters."""
        dirty = self._count_placed()
        touches = self.fleet.touches
        node_key, nodes, key_of, fails = self.node_key, self.fleet.nodes, self.key_of, self.fails
        for o in touches[self.touch_seen:]:
            old = node_key.get(o)
            if old is not None:  # a member not yet found failing
                # Most shards leave their node too full for this index's replicas (two thirds at
                # 4,096 hosts): asked now, such a node is dropped instead of keyed, pushed, and
                # popped again when it surfaces.
                node = nodes[o]
                key = None if fails(node) else key_of(node)
                if key != old:
                    node_key[o] = key
                    gid = self.group_of[o]
                    if key is not None:
                        heapq.heappush(self.heaps[gid], key)
                    if gid not in dirty and self._moves_best(gid, o, key):
                        dirty.add(gid)
        self.touch_seen = len(touches)
        for gid in dirty:
            self._settle(gid)
        while self.top:
            gkey = self.top[0]
            o = gkey & MASK
            gid = self.group_of[o]
            if self.group_key[gid] != gkey:
                heapq.heappop(self.top)
                continue
            node = self.fleet.nodes[o]
            if not self.fails(node):
                return node
            # Failed without a shard of its own (another node took a shared disk): gone for good.
            self.node_key[node.ordinal] = None
            self._settle(gid)
        return None


# What placement builds over a fleet, kept on it for the plan (Fleet.table): one SpreadIndex per
# (static key, weights source, spread labels), and the Grouping those of one static key and labels share.
SPREADS: PlanTable[tuple[StaticKey, str, tuple[str, ...]], SpreadIndex] = PlanTable("spread indexes")
GROUPINGS: PlanTable[tuple[StaticKey, tuple[str, ...]], Grouping] = PlanTable("spread groupings")
