"""Rail alignment: is adapter N of every host on the same leaf as adapter N of its peers?

Multi-node jobs send GPU N's traffic through adapter N, so when adapter N of two hosts
shares a leaf, that traffic never climbs to a spine. On a small fabric "aligned" means
each adapter name sits on one leaf for all hosts. A large fabric repeats that pattern
once per scalable unit (hosts 1-32 on one set of leaves, 33-64 on the next), so this
module judges each host against the hosts it is cabled with, by majority, in two ways:

1. A leaf carries one rail: most adapters on a leaf share a name; a host whose adapter
   on that leaf has another name is cabled to the wrong rail.
2. Hosts stay together across rails: the hosts whose adapter K shares a leaf should,
   by majority, also share the leaf of every other adapter J; a host whose J is
   elsewhere breaks that.

Both reduce to "every adapter N on one leaf" on a fabric of one unit, and neither
blames a whole unit for one swapped cable. A tie (two hosts that disagree) blames both:
nobody can tell which one is right. Hosts with a single adapter on the fabric (storage,
service nodes) have no rails and are left out; when no host has two, rails are n/a.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import TypeVar

from llmgw.fabric.structure import Adapter, Rails, natural_key

K = TypeVar("K")


def unique_top(counts: Counter[K]) -> K | None:
    """The most common value, or None when two values share the top count."""
    best: K | None = None
    first = second = 0
    for value, n in counts.items():
        if n > first:
            best, first, second = value, n, first
        elif n > second:
            second = n
    return best if first > second else None


def rail_places(adapters: Sequence[Adapter]) -> dict[str, Adapter]:
    """Rail name -> the adapter port on it that is cabled to a switch (first one wins)."""
    places: dict[str, Adapter] = {}
    for a in adapters:
        if a.switch_guid is not None:
            places.setdefault(a.rail, a)
    return places


def compute_rails(hosts: Mapping[str, Sequence[Adapter]]) -> Rails:
    multi = {h: p for h, ads in hosts.items() if len(p := rail_places(ads)) >= 2}
    if not multi:
        return Rails(aligned=None, reason="one adapter per host on this fabric")
    # Hosts cabled alike (a scalable unit: the same leaf for each rail) count alike, so
    # the tallies and the verdicts are worked out once per cabling, not once per host.
    leaf_names: dict[int, str] = {}
    cablings: Counter[tuple[tuple[str, int], ...]] = Counter()
    cabling_of: dict[str, tuple[tuple[str, int], ...]] = {}
    for host, places in multi.items():
        pairs: list[tuple[str, int]] = []
        for rail, a in places.items():
            assert a.switch_guid is not None and a.switch is not None
            leaf_names[a.switch_guid] = a.switch
            pairs.append((rail, a.switch_guid))
        cabling_of[host] = key = tuple(pairs)
        cablings[key] += 1
    per_leaf: dict[int, Counter[str]] = defaultdict(Counter)
    together: dict[tuple[str, int, str], Counter[int]] = defaultdict(Counter)
    for cabling, hosts_alike in cablings.items():
        for rail, leaf in cabling:
            per_leaf[leaf][rail] += hosts_alike
            for other, other_leaf in cabling:
                if other != rail:
                    together[(rail, leaf, other)][other_leaf] += hosts_alike

    carried_by = {leaf: unique_top(c) for leaf, c in per_leaf.items()}
    majority = {key: unique_top(c) for key, c in together.items()}

    def fits(cabling: tuple[tuple[str, int], ...]) -> bool:
        """No leaf carries another rail, and every rail is where its peers vote it."""
        for rail, leaf in cabling:
            carried = carried_by[leaf]
            if carried is not None and carried != rail:
                return False
            for other, other_leaf in cabling:
                if other != rail and majority[(rail, leaf, other)] != other_leaf:
                    return False
        return True

    fitting = {cabling: fits(cabling) for cabling in cablings}
    problems: dict[tuple[str, str], str] = {}  # (host, rail) -> the first sentence found
    for host, places in multi.items():
        if fitting[cabling_of[host]]:
            continue
        # A cabling its peers disagree with: say what is wrong, for this host.
        for rail, a in places.items():
            assert a.switch_guid is not None
            carried = carried_by[a.switch_guid]
            if carried is not None and carried != rail:
                problems.setdefault((host, rail), (
                    f"{host} {rail} is on {a.switch} port {a.switch_port}, a leaf that carries "
                    f"{carried} for {per_leaf[a.switch_guid][carried]} hosts"))
        # Each rail of the host votes on where each other adapter should be; the adapter
        # most of them vote against is the misplaced one (a host with two rails blames both).
        votes: dict[str, list[str]] = defaultdict(list)
        for rail, a in places.items():
            assert a.switch_guid is not None
            for other, b in places.items():
                if other == rail:
                    continue
                best = majority[(rail, a.switch_guid, other)]
                if best != b.switch_guid:
                    where = ("split over several leaves" if best is None
                             else f"on {leaf_names[best]}")
                    votes[other].append(
                        f"{host} {other} is on {b.switch} port {b.switch_port}; the hosts "
                        f"whose {rail} share {a.switch} have their {other} {where}")
        if votes:
            most = max(len(v) for v in votes.values())
            blamed = [o for o, v in votes.items() if 2 * len(v) > len(places) - 1] or \
                [o for o, v in votes.items() if len(v) == most]
            for other in blamed:
                problems.setdefault((host, other), votes[other][0])
    bad = sorted({host for host, _ in problems}, key=natural_key)
    ordered = [problems[k] for k in sorted(problems, key=lambda k: (natural_key(k[0]),
                                                                     natural_key(k[1])))]
    return Rails(aligned=not bad, misaligned_hosts=tuple(bad), problems=tuple(ordered))


def sets_aligned(places: Sequence[Mapping[str, int]]) -> bool:
    """For a chosen set of hosts (rail -> leaf GUID each): every rail on one leaf for all,
    and every host on the same rails. What a multi-node replica wants."""
    if not places:
        return True
    rails = set(places[0])
    if not rails or any(set(p) != rails for p in places):
        return False
    return all(len({p[r] for p in places}) == 1 for r in rails)
