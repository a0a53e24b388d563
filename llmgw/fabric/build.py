"""From a parsed `Graph` to `Fabric`s: split into connected subnets, then work out switch
tiers, which adapter is whose, degraded cables and rail alignment.

Every step is linear in the number of ports (one pass, one breadth-first search, one
count per kind of cable), so a fabric of thousands of hosts parses in about a second.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Iterable

from llmgw.fabric.graph import Graph, RawCable, RawNode, RawPort
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
    parent = {key: key for key in graph.nodes}

    def find(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for c in cables:
        ra, rb = find(c.a.key), find(c.b.key)
        if ra != rb:
            parent[ra] = rb
    members: dict[str, list[RawNode]] = defaultdict(list)
    for key, node in graph.nodes.items():
        members[find(key)].append(node)
    wired: dict[str, list[RawCable]] = defaultdict(list)
    for c in cables:
        wired[find(c.a.key)].append(c)
    fabrics = [_build_one(graph, nodes, wired[root]) for root, nodes in members.items()]
    return sorted(fabrics, key=lambda f: f.id)


def _hops(nodes: list[RawNode], cables: list[RawCable],
          owners: dict[str, tuple[str, str]]) -> dict[str, int]:
    """Fewest cables from a host adapter to each switch (multi-source BFS).

    Only host adapters count as sources: a switch's own SHARP aggregation node is an
    adapter on every switch, and would make every spine look like a leaf. A fabric
    without a single host adapter falls back to every adapter."""
    sources = [n.key for n in nodes if n.key in owners] or \
        [n.key for n in nodes if n.kind != "switch"]
    neighbours: dict[str, list[str]] = defaultdict(list)
    kinds = {n.key: n.kind for n in nodes}
    for c in cables:
        neighbours[c.a.key].append(c.b.key)
        neighbours[c.b.key].append(c.a.key)
    dist: dict[str, int] = {s: 0 for s in sources}
    queue = deque(sources)
    while queue:
        key = queue.popleft()
        for nxt in neighbours[key]:
            if nxt not in dist and kinds[nxt] == "switch":
                dist[nxt] = dist[key] + 1
                queue.append(nxt)
    return {k: d for k, d in dist.items() if kinds[k] == "switch"}


def _expected(rates: Iterable[Rate]) -> Rate | None:
    """The rate most cables of a kind run at; on a tie the faster one, so the slower
    half of an evenly split fabric is the one reported."""
    counts = Counter(rates)  # a handful of distinct rates: judge each once, not per cable
    known = [r for r in counts if r.known]
    if not known:
        return None
    return max(known, key=lambda r: (counts[r], r.gbps or 0.0))


def _build_one(graph: Graph, nodes: list[RawNode], cables: list[RawCable]) -> Fabric:
    owners = {n.key: o for n in nodes if (o := host_and_device(n)) is not None}
    hops = _hops(nodes, cables, owners)

    # Where a switch sorts as a cable's lower end: nearer to the adapters, then by name.
    # Worked out once per switch, not once per cable.
    order = {n.key: (hops.get(n.key, _FAR), natural_key(n.description))
             for n in nodes if n.kind == "switch"}
    no_owner = (None, None)

    def end(node: RawNode, port: RawPort) -> End:
        host, ca = owners.get(node.key, no_owner)
        return End(node.kind, node.description, port.port, node.guid, port.port_guid, host, ca)

    # Each cable with its ends in reading order, and the node keys behind those ends.
    oriented: list[tuple[RawCable, End, End, tuple[str, str], LinkKind]] = []
    for c in cables:
        a, b = c.a, c.b
        a_switch, b_switch = a.kind == "switch", b.kind == "switch"
        if a_switch and (not b_switch or (order[b.key], c.b_port.port)
                         < (order[a.key], c.a_port.port)):
            ea, eb = end(b, c.b_port), end(a, c.a_port)
            a, b = b, a
        else:
            ea, eb = end(a, c.a_port), end(b, c.b_port)
        if ea.kind == "switch":
            kind: LinkKind = "switch"
        else:
            kind = "host" if ea.host is not None and eb.kind == "switch" else "other"
        oriented.append((c, ea, eb, (a.key, b.key), kind))

    expected: dict[LinkKind, Rate] = {}
    for kind in _KIND_ORDER:
        rate = _expected(c.rate for c, _, _, _, k in oriented if k == kind)
        if rate is not None:
            expected[kind] = rate

    links: list[Link] = []
    # (node, port) -> link, mine, far; only adapters' and routers' ends are looked up.
    ends: dict[tuple[str, int], tuple[Link, End, End]] = {}
    # Judged once per distinct rate and kind; keyed by the Rate's id (every cable's rate
    # stays alive in `cables`), which is cheaper to hash than its fields.
    below: dict[tuple[int, LinkKind], bool] = {}
    for c, ea, eb, (ka, kb), kind in oriented:
        rate = c.rate
        exp = expected.get(kind)
        slow = below.get((id(rate), kind))
        if slow is None:
            gbps = rate.gbps
            slow = below[(id(rate), kind)] = (gbps is not None and exp is not None
                                              and gbps < (exp.gbps or 0.0))
        link = Link(ea, eb, rate, kind, exp, slow)
        links.append(link)
        if ea.kind != "switch":
            ends[(ka, ea.port)] = (link, ea, eb)
        if eb.kind != "switch":
            ends[(kb, eb.port)] = (link, eb, ea)
    links.sort(key=lambda li: (_KIND_ORDER[li.kind], natural_key(li.a.name), li.a.port,
                               natural_key(li.b.name), li.b.port))

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
        notes=tuple(_notes(cables, sorted_hosts)))


def _fabric_id(nodes: list[RawNode], switch_guids: dict[str, int | None]) -> str:
    guids = [g for g in switch_guids.values() if g is not None]
    if not guids:  # adapters cabled back to back: the lowest GUID any of them shows
        guids = [g for n in nodes for g in (n.guid, *(p.port_guid for p in n.ports.values()))
                 if g is not None]
    return f"ib-{min(guids):016x}"


def _notes(cables: list[RawCable], hosts: dict[str, tuple[Adapter, ...]]) -> list[str]:
    notes: list[str] = []
    differ = sum(1 for c in cables if c.rates_differ)
    if differ:
        notes.append(f"{differ} cable{'s' if differ != 1 else ''} reported a different rate "
                     "at each end; each counts at the slower one")
    unknown = sum(1 for c in cables if not c.rate.known)
    if unknown:
        one = unknown == 1
        notes.append(f"{unknown} cable{'' if one else 's'} report{'s' if one else ''} a rate "
                     f"ibnetdiscover could not name (?? or ???); {'it is' if one else 'they are'} "
                     "not judged")
    for host, ads in hosts.items():
        seen = Counter(a.rail for a in ads)
        for rail, n in sorted(seen.items()):
            if n > 1:
                notes.append(f"{host} has {n} adapters named {rail}; rails use the first")
    return notes
