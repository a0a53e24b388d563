"""From a parsed `Graph` to `Fabric`s: split into connected subnets, then work out switch
tiers, which adapter is whose, degraded cables and rail alignment.

Every step is linear in the number of ports (one pass, one breadth-first search, one
count per kind of cable), so a fabric of thousands of hosts parses in about a second.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque

from llmgw.fabric.graph import Graph, NodeKind, RawCable, RawNode, RawPort
from llmgw.fabric.rails import compute_rails
from llmgw.fabric.rates import Rate
from llmgw.fabric.structure import (
    Adapter,
    End,
    Endpoint,
    Fabric,
    Link,
    LinkKind,
    Rails,
    Switch,
    natural_key,
)

_KIND_ORDER: dict[LinkKind, int] = {"host": 0, "switch": 1, "other": 2}
_FAR = 1 << 30  # sorts switches no adapter reaches after every tier


def host_and_device(node: RawNode) -> tuple[str, str] | None:
    """`"gpu-node-03 mlx5_1"` -> (gpu-node-03, mlx5_1): how hosts name their adapters
    (the kernel sets the description to `<hostname> <device>`). Anything else, such as
    a switch's `Mellanox Technologies Aggregation Node`, is no host's adapter."""
    if node.kind != "ca":
        return None
    parts = node.description.split()
    return (parts[0], parts[1]) if len(parts) == 2 else None


def build_fabrics(graph: Graph) -> list[Fabric]:
    cables = list(graph.cables())
    nodes = graph.nodes
    # Connected subnets: a walk along each node's ports (a capture is nearly always one).
    root: dict[str, str] = {}
    for key in nodes:
        if key in root:
            continue
        root[key] = key
        stack = [key]
        while stack:
            for p in nodes[stack.pop()].ports.values():
                if p.peer not in root:
                    root[p.peer] = key
                    stack.append(p.peer)
    members: dict[str, list[RawNode]] = defaultdict(list)
    for key, node in nodes.items():
        members[root[key]].append(node)
    if len(members) == 1:
        wired: dict[str, list[RawCable]] = {next(iter(members)): cables}
    else:
        wired = defaultdict(list)
        for c in cables:
            wired[root[c.a.key]].append(c)
    fabrics = [_build_one(graph, group, wired.get(r, [])) for r, group in members.items()]
    return sorted(fabrics, key=lambda f: f.id)


def _hops(graph: Graph, nodes: list[RawNode], owners: dict[str, tuple[str, str]]) -> dict[str, int]:
    """Fewest cables from a host adapter to each switch (multi-source BFS).

    Only host adapters count as sources: a switch's own SHARP aggregation node is an
    adapter on every switch, and would make every spine look like a leaf. A fabric
    without a single host adapter falls back to every adapter."""
    sources = [n.key for n in nodes if n.key in owners] or \
        [n.key for n in nodes if n.kind != "switch"]
    every = graph.nodes
    dist: dict[str, int] = {s: 0 for s in sources}
    queue = deque(sources)
    while queue:
        key = queue.popleft()
        d = dist[key] + 1
        for p in every[key].ports.values():
            nxt = p.peer
            if nxt not in dist and every[nxt].kind == "switch":
                dist[nxt] = d
                queue.append(nxt)
    return {k: d for k, d in dist.items() if every[k].kind == "switch"}


def _expected(counts: Counter[Rate]) -> Rate | None:
    """The rate most cables of a kind run at; on a tie the faster one, so the slower
    half of an evenly split fabric is the one reported."""
    known = [r for r in counts if r.known]
    if not known:
        return None
    return max(known, key=lambda r: (counts[r], r.gbps or 0.0))


def _build_one(graph: Graph, nodes: list[RawNode], cables: list[RawCable]) -> Fabric:
    owners = {n.key: o for n in nodes if (o := host_and_device(n)) is not None}
    hops = _hops(graph, nodes, owners)

    # Where a switch sorts as a cable's lower end: nearer to the adapters, then by name.
    # Worked out once per switch, not once per cable.
    order = {n.key: (hops.get(n.key, _FAR), natural_key(n.description))
             for n in nodes if n.kind == "switch"}
    # What every End of a node repeats, and how its name sorts: once per node, not per port.
    same: dict[str, tuple[NodeKind, str, int | None, str | None, str | None]] = {}
    names: dict[str, tuple[tuple[int, int | str], ...]] = {}
    for n in nodes:
        host, ca = owners.get(n.key, (None, None))
        same[n.key] = (n.kind, n.description, n.guid, host, ca)
        names[n.key] = natural_key(n.description)

    # Each cable with its ends in reading order, its kind and the node keys behind it;
    # and how many cables of each kind run at each rate.
    oriented: list[tuple[tuple[int, LinkKind], Rate, RawNode, RawPort, RawNode, RawPort,
                         LinkKind]] = []
    # Tallied by the Rate object's id (the parsers share one per distinct rate, and every
    # one stays alive in `cables`), then merged by value: hashing a Rate per cable cost
    # more than the tally itself.
    by_id: dict[tuple[int, LinkKind], int] = {}
    first_of: dict[int, Rate] = {}
    differ = 0  # cables whose two ends reported different rates
    for c in cables:
        a, pa, b, pb = c.a, c.a_port, c.b, c.b_port
        if a.kind == "switch":
            if b.kind != "switch":
                a, pa, b, pb = b, pb, a, pa
                kind: LinkKind = "host" if a.key in owners else "other"
            else:
                kind = "switch"
                if (order[b.key], pb.port) < (order[a.key], pa.port):
                    a, pa, b, pb = b, pb, a, pa
        else:
            kind = "host" if b.kind == "switch" and a.key in owners else "other"
        if c.rates_differ:
            differ += 1
        rate = c.rate
        rid = (id(rate), kind)
        oriented.append((rid, rate, a, pa, b, pb, kind))
        tally = by_id.get(rid)
        if tally is None:
            by_id[rid] = 1
            first_of[rid[0]] = rate
        else:
            by_id[rid] = tally + 1
    counts: dict[LinkKind, Counter[Rate]] = {k: Counter() for k in _KIND_ORDER}
    for (rid_, kind), tally in by_id.items():  # first-seen order, as cable by cable
        counts[kind][first_of[rid_]] += tally
    unknown = sum(t for (rid_, _), t in by_id.items() if not first_of[rid_].known)

    expected: dict[LinkKind, Rate] = {}
    for kind in _KIND_ORDER:
        top = _expected(counts[kind])
        if top is not None:
            expected[kind] = top

    links: list[Link] = []
    sort_keys: list[tuple[int, tuple[tuple[int, int | str], ...], int,
                          tuple[tuple[int, int | str], ...], int]] = []
    # (node, port) -> link, mine, far; only adapters' and routers' ends are looked up.
    ends: dict[tuple[str, int], tuple[Link, End, End]] = {}
    # The expected rate and whether a cable is below it, judged once per distinct rate
    # and kind (the tally's keys).
    judged: dict[tuple[int, LinkKind], tuple[Rate | None, bool]] = {}
    for rid in by_id:
        exp = expected.get(rid[1])
        gbps = first_of[rid[0]].gbps
        judged[rid] = (exp, gbps is not None and exp is not None and gbps < (exp.gbps or 0.0))
    # End and Link are built with tuple.__new__, as their generated __new__ does, minus a
    # Python call per tuple (144,000 of them at 16,000 adapters).
    new = tuple.__new__
    for rid, rate, a, pa, b, pb, kind in oriented:
        exp, slow = judged[rid]
        ka, kb = a.key, b.key
        sa, sb = same[ka], same[kb]
        ea = new(End, (sa[0], sa[1], pa.port, sa[2], pa.port_guid, sa[3], sa[4]))
        eb = new(End, (sb[0], sb[1], pb.port, sb[2], pb.port_guid, sb[3], sb[4]))
        link = new(Link, (ea, eb, rate, kind, exp, slow))
        links.append(link)
        sort_keys.append((_KIND_ORDER[kind], names[ka], pa.port, names[kb], pb.port))
        if sa[0] != "switch":
            ends[(ka, pa.port)] = (link, ea, eb)
        if sb[0] != "switch":
            ends[(kb, pb.port)] = (link, eb, ea)
    # Sorted by kind, then each end's name (naturally) and port; stable, as before.
    links = [links[i] for i in sorted(range(len(links)), key=sort_keys.__getitem__)]

    switch_guids = {n.key: n.guid for n in nodes if n.kind == "switch"}
    hosts: dict[str, list[Adapter]] = defaultdict(list)
    endpoints: list[Endpoint] = []
    for node in nodes:
        if node.kind == "switch":
            continue
        for port in node.ports.values():
            link, mine, far = ends[(node.key, port.port)]
            if node.key not in owners:
                endpoints.append(Endpoint(end=mine, peer=far))
                continue
            host, ca = owners[node.key]
            to_switch = far.kind == "switch"
            hosts[host].append(Adapter(
                host=host, ca=ca, port=port.port, rail=ca if port.port == 1 else f"{ca}/{port.port}",
                guid=node.guid, port_guid=port.port_guid, lid=port.lid,
                switch=far.name if to_switch else None,
                switch_guid=far.guid if to_switch else None,
                switch_port=far.port if to_switch else None, peer=far.label,
                rate=link.rate, expected=link.expected, degraded=link.degraded))
    sorted_hosts = {h: tuple(sorted(ads, key=lambda a: (natural_key(a.ca), a.port,
                                                         a.port_guid or 0)))
                    for h, ads in sorted(hosts.items(), key=lambda kv: natural_key(kv[0]))}
    endpoints.sort(key=lambda e: (natural_key(e.end.name), e.end.guid or 0, e.end.port))

    switches = sorted(
        (Switch(guid=n.guid or 0, name=n.description, hops=hops.get(n.key), lid=n.lid,
                ports=n.nports) for n in nodes if n.kind == "switch"),
        key=lambda s: (s.hops if s.hops is not None else _FAR, natural_key(s.name), s.guid))
    rails = compute_rails(sorted_hosts) if sorted_hosts else Rails(
        aligned=None, reason="no host adapters on this fabric")
    return Fabric(
        id=_fabric_id(nodes, switch_guids), source=graph.source, format=graph.format,
        switches=tuple(switches), hosts=sorted_hosts, endpoints=tuple(endpoints),
        links=tuple(links), expected_rates=expected, rails=rails,
        notes=tuple(_notes(differ, unknown, sorted_hosts)))


def _fabric_id(nodes: list[RawNode], switch_guids: dict[str, int | None]) -> str:
    guids = [g for g in switch_guids.values() if g is not None]
    if not guids:  # adapters cabled back to back: the lowest GUID any of them shows
        guids = [g for n in nodes for g in (n.guid, *(p.port_guid for p in n.ports.values()))
                 if g is not None]
    return f"ib-{min(guids):016x}"


def _notes(differ: int, unknown: int, hosts: dict[str, tuple[Adapter, ...]]) -> list[str]:
    """`differ`: cables whose ends reported different rates; `unknown`: cables whose rate
    ibnetdiscover could not name (both counted while the cables are oriented)."""
    notes: list[str] = []
    if differ:
        notes.append(f"{differ} cable{'s' if differ != 1 else ''} reported a different rate "
                     "at each end; each counts at the slower one")
    if unknown:
        one = unknown == 1
        notes.append(f"{unknown} cable{'' if one else 's'} report{'s' if one else ''} a rate "
                     f"ibnetdiscover could not name (?? or ???); {'it is' if one else 'they are'} "
                     "not judged")
    for host, ads in hosts.items():
        if len({a.rail for a in ads}) == len(ads):  # nearly every host: no rail twice
            continue
        seen = Counter(a.rail for a in ads)
        for rail, n in sorted(seen.items()):
            if n > 1:
                notes.append(f"{host} has {n} adapters named {rail}; rails use the first")
    return notes
