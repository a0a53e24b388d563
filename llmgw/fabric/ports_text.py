"""Reading `ibnetdiscover -p` (the ports report) into a `Graph`.

One line per port, connected or not (ibnetdiscover.c, `dump_ports_report`):

    CA     5  1 0xb83fd20300a10007 4x HDR - SW     2  4 0x0c42a10300b10000 ( 'gpu-node-04 mlx5_0' - 'MF0;...' )
    SW     2 40 0x0c42a10300b10000 4x SDR                                    'MF0;ib-sw-01:MQM8790/U1'

The GUID printed is the *port* GUID. A switch's ports all carry the switch GUID, so a
switch is known by it; an adapter is known only by its port GUID (its node GUID is not
in this format). A port with no peer is down: its width and speed are what the port
enables, not a trained rate, and it is not a cable.
"""

from __future__ import annotations

import re

from llmgw.fabric.graph import Graph, NodeKind, RawNode, RawPort
from llmgw.fabric.rates import SPEEDS, WIDTHS, Rate

_HEX = r"[0-9a-fA-F]+"
_TYPE = r"CA|SW|RT"
_WIDTH = "|".join(re.escape(w) for w in WIDTHS)
_SPEED = "|".join(re.escape(s) for s in SPEEDS)
_END = rf"(?P<{{p}}type>{_TYPE})\s+(?P<{{p}}lid>\d+)\s+(?P<{{p}}port>\d+)\s+0x(?P<{{p}}guid>{_HEX})"
_LOCAL = _END.format(p="")
_PEER = _END.format(p="p")
CONNECTED = re.compile(rf"^{_LOCAL}\s+(?P<width>{_WIDTH})\s+(?P<speed>{_SPEED})\s+-\s+{_PEER}"
                       r"\s+\(\s'(?P<desc>.*?)'\s+-\s+'(?P<pdesc>.*)'\s+\)\s*$")
UNCONNECTED = re.compile(rf"^{_LOCAL}\s+(?P<width>{_WIDTH})\s+(?P<speed>{_SPEED})\s+"
                         r"'(?P<desc>.*)'\s*$")
START = re.compile(rf"^(?:{_TYPE})\s+\d+\s+\d+\s+0x")

_KIND: dict[str, NodeKind] = {"SW": "switch", "CA": "ca", "RT": "router"}
EXAMPLE = ("CA     5  1 0xb83fd20300a10007 4x HDR - SW     2  4 0x0c42a10300b10000 "
           "( 'gpu-node-04 mlx5_0' - 'MF0;ib-sw-01:MQM8790/U1' )")


def looks_like_ports(first_line: str) -> bool:
    return START.match(first_line) is not None


def _key(type_: str, guid: int) -> str:
    return f"{type_}-{guid:016x}"


def parse_ports(text: str, source: str) -> Graph:
    """The -p format into a Graph; every line is understood or the whole text fails."""
    g = Graph(source=source, format="ibnetdiscover -p")
    listed: dict[str, tuple[set[int], int]] = {}  # node -> every port it lists, last line
    rates: dict[tuple[str, str], Rate] = {}  # one Rate per distinct rate: cheap compares
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line:
            continue
        m = CONNECTED.match(line) or UNCONNECTED.match(line)
        if m is None:
            raise g.error(n, f"cannot read {_show(line)}: expected a port line like {EXAMPLE!r}")
        type_, guid, port = m["type"], int(m["guid"], 16), int(m["port"])
        kind = _KIND[type_]
        key = _key(type_, guid)
        node = g.nodes.get(key)
        if node is None:
            node = RawNode(key=key, kind=kind, guid=guid if kind == "switch" else None,
                           description=m["desc"], line=n,
                           lid=int(m["lid"]) if kind == "switch" else None)
            g.nodes[key] = node
        seen = listed.setdefault(key, (set(), n))[0]
        if port in seen:
            raise g.error(n, f"port {port} of {node.description!r} is listed twice")
        seen.add(port)
        listed[key] = (seen, n)
        if m.re is UNCONNECTED:
            continue
        rate = rates.get((m["width"], m["speed"]))
        if rate is None:
            rate = rates[(m["width"], m["speed"])] = Rate(m["width"], m["speed"])
        node.ports[port] = RawPort(
            port=port, peer=_key(m["ptype"], int(m["pguid"], 16)), peer_port=int(m["pport"]),
            rate=rate, line=n,
            port_guid=guid if kind != "switch" else None,
            lid=int(m["lid"]) if kind != "switch" else None)
    if not g.nodes:
        raise g.error(1, "found no port line at all: expected `ibnetdiscover -p` output")
    # Every port of a switch is listed, highest first; a switch whose list stops short of
    # port 1 was cut off, and the cables on its missing ports would vanish unnoticed.
    for key, (seen, last) in listed.items():
        node = g.nodes[key]
        if node.kind == "switch" and seen != set(range(1, max(seen) + 1)):
            missing = sorted(set(range(1, max(seen) + 1)) - seen)
            raise g.error(last, f"switch {node.description!r} lists no port {missing[0]}: "
                          f"expected every port from {max(seen)} down to 1 (the capture looks "
                          "truncated)")
    g.validate()
    return g


def _show(line: str) -> str:
    return repr(line if len(line) <= 100 else line[:97] + "...")
