"""Reading the default `ibnetdiscover` output (the "topology file") into a `Graph`.

The format, as infiniband-diags writes it (ibnetdiscover.c, `dump_topology`): a `#`
header naming the node discovery started from, then one block per node:

    vendid=0x2c9
    devid=0xd2f0
    sysimgguid=0xc42a10300b10000
    switchguid=0xc42a10300b10000(c42a10300b10000)
    Switch	40 "S-0c42a10300b10000"		# "MF0;ib-sw-01:MQM8790/U1" enhanced port 0 lid 2 lmc 0
    [1]	"H-b83fd20300a10000"[1](b83fd20300a10001) 		# "gpu-node-01 mlx5_0" lid 1 4xHDR

and for an adapter (`Ca`; `Rt` for a router, with `rtguid=`):

    caguid=0xb83fd20300a10006
    Ca	1 "H-b83fd20300a10006"		# "gpu-node-04 mlx5_0"
    [1](b83fd20300a10007) 	"S-0c42a10300b10000"[4]		# lid 5 lmc 0 "MF0;ib-sw-01:MQM8790/U1" lid 2 4xHDR

Only connected ports are listed. Anything else is an error that names the line and says
what was expected there: a map built from text we did not understand would be wrong
in ways nobody notices.
"""

from __future__ import annotations

import re
from typing import NoReturn

from llmgw.fabric.graph import Graph, NodeKind, RawNode, RawPort
from llmgw.fabric.rates import SPEEDS, WIDTHS, Rate

_HEX = r"[0-9a-fA-F]+"
_RATE = (r"(?P<width>" + "|".join(re.escape(w) for w in WIDTHS) + r")"
         r"(?P<speed>" + "|".join(re.escape(s) for s in SPEEDS) + r")")
# Whatever -f (` s=4 w=2 v=4 e=8`) or the Xsigo extras add after the rate.
_TAIL = r"(?:\s.*)?$"

INITIATED = re.compile(rf"^#\s*Initiated from node (?P<guid>{_HEX}) port (?P<port>{_HEX})")
IDS = re.compile(rf"^(?:vendid|devid|sysimgguid)=0x{_HEX}\s*(?:#.*)?$")
GUID = re.compile(rf"^(?P<kind>switch|ca|rt)guid=0x(?P<guid>{_HEX})(?:\((?P<pguid>{_HEX})\))?"
                  r"\s*(?:#.*)?$")
NODE = re.compile(r'^(?P<type>Switch|Ca|Rt)\s+(?P<nports>\d+)\s+"(?P<name>[^"]+)"\s*'
                  r'#\s*"(?P<desc>.*)"(?P<tail>.*)$')
SWITCH_TAIL = re.compile(r"^\s*(?:enhanced|base) port 0 lid (?P<lid>\d+) lmc \d+\s*$")
SWITCH_PORT = re.compile(
    rf'^\[(?P<port>\d+)\](?:\[ext \d+\])?\s+"(?P<peer>[^"]+)"\[(?P<pport>\d+)\]'
    rf'(?:\[ext \d+\])?\s*(?:\((?P<pguid>{_HEX})\))?\s*'
    rf'#\s*"(?P<pdesc>.*)"\s+lid (?P<plid>\d+) {_RATE}{_TAIL}')
CA_PORT = re.compile(
    rf'^\[(?P<port>\d+)\]\((?P<guid>{_HEX})\)\s*"(?P<peer>[^"]+)"\[(?P<pport>\d+)\]'
    rf'(?:\[ext \d+\])?\s*(?:\((?P<pguid>{_HEX})\))?\s*'
    rf'#\s*lid (?P<lid>\d+) lmc \d+ "(?P<pdesc>.*)"\s+lid (?P<plid>\d+) {_RATE}{_TAIL}')
NAME = re.compile(rf"^[SHR]-(?P<guid>{_HEX})$")

_KIND: dict[str, NodeKind] = {"Switch": "switch", "Ca": "ca", "Rt": "router"}
_GUID_KIND: dict[str, NodeKind] = {"switch": "switch", "ca": "ca", "rt": "router"}
_GUID_LINE = {"switch": "switchguid=", "ca": "caguid=", "router": "rtguid="}

SWITCH_PORT_EXAMPLE = '[1]\t"H-b83fd20300a10000"[1](b83fd20300a10001) \t\t# "host mlx5_0" lid 1 4xHDR'
CA_PORT_EXAMPLE = '[1](b83fd20300a10001) \t"S-0c42a10300b10000"[1]\t\t# lid 1 lmc 0 "switch" lid 2 4xHDR'


def looks_like_topology(first_line: str) -> bool:
    return first_line.startswith(("#", "vendid=", "devid=", "sysimgguid=", "switchguid=",
                                  "caguid=", "rtguid=", "Switch", "Ca\t", "Ca ", "Rt"))


def parse_topology(text: str, source: str) -> Graph:
    """The default format into a Graph; every line is understood or the whole text fails."""
    g = Graph(source=source, format="ibnetdiscover")
    initiated: tuple[int, int] | None = None  # (line, node guid)
    pending: tuple[NodeKind, int, int] | None = None  # guid line seen: (kind, guid, line)
    node: RawNode | None = None
    is_switch = True
    rates: dict[tuple[str, str], Rate] = {}  # one Rate per distinct rate: cheap compares
    port_re = SWITCH_PORT
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line:
            continue
        first = line[0]
        if first == "[":  # most lines: ports, read inline (a call per port costs a third)
            if node is None:
                raise g.error(n, f"found a port line outside any node: {_show(line)} "
                              "(expected a `Switch` or `Ca` line before it)")
            m = port_re.match(line)
            if m is None:
                _bad_port(g, node, n, line)
            port_s, peer, pport, width, speed = m.group("port", "peer", "pport", "width",
                                                        "speed")
            port = int(port_s)
            ports = node.ports
            if not 1 <= port <= (node.nports or port) or port in ports:
                _bad_port_number(g, node, n, port)
            rate = rates.get((width, speed))
            if rate is None:
                rate = rates[(width, speed)] = Rate(width, speed)
            if is_switch:
                ports[port] = RawPort(port, peer, int(pport), rate, n)
            else:
                guid_s, lid_s = m.group("guid", "lid")
                ports[port] = RawPort(port, peer, int(pport), rate, n, int(guid_s, 16),
                                      int(lid_s))
            continue
        if first == "#":
            m = INITIATED.match(line)
            if m:
                initiated = (n, int(m["guid"], 16))
            continue
        node = None  # a port line never follows anything but its node or its siblings
        if IDS.match(line):
            if line.startswith("vendid="):
                pending = None
            continue
        m = GUID.match(line)
        if m:
            pending = (_GUID_KIND[m["kind"]], int(m["guid"], 16), n)
            continue
        m = NODE.match(line)
        if m:
            node = _add_node(g, m, pending, n, line)
            is_switch = node.kind == "switch"
            port_re = SWITCH_PORT if is_switch else CA_PORT
            pending = None
            continue
        raise g.error(n, f"cannot read {_show(line)}: expected a node block (vendid=, devid=, "
                      "switchguid=/caguid=, then a `Switch` or `Ca` line) or one of its "
                      "port lines")

    if not g.nodes:
        raise g.error(max(1, len(text.splitlines())), "found no node at all: expected "
                      "ibnetdiscover output with `Switch` and `Ca` blocks",
                      hint="run `ibnetdiscover` (no options, or -p) on a host of the fabric")
    g.validate()
    if initiated is not None:
        line_no, guid = initiated
        if not any(nd.guid == guid for nd in g.nodes.values()):
            raise g.error(line_no, f"discovery started from node {guid:016x}, but the output "
                          "never lists that node (expected its `Ca` block: the capture looks "
                          "truncated)")
    return g


def _add_node(g: Graph, m: re.Match[str], pending: tuple[NodeKind, int, int] | None,
              n: int, line: str) -> RawNode:
    kind = _KIND[m["type"]]
    if pending is None or pending[0] != kind:
        raise g.error(n, f"found a `{m['type']}` line without the {_GUID_LINE[kind]} line "
                      "that must come just before it")
    guid = pending[1]
    name = m["name"]
    named = NAME.match(name)
    if named and int(named["guid"], 16) != guid:
        raise g.error(n, f"node {name} follows {_GUID_LINE[kind]}0x{guid:x} (line {pending[2]}): "
                      "expected the name to carry the same GUID")
    lid: int | None = None
    tail = m["tail"]
    if kind == "switch":
        t = SWITCH_TAIL.match(tail)
        if t is None:
            raise g.error(n, f"cannot read the end of {_show(line)}: expected "
                          "`enhanced port 0 lid N lmc N` after the switch description")
        lid = int(t["lid"])
    elif tail.strip() not in ("", "(scp)"):
        raise g.error(n, f"cannot read the end of {_show(line)}: expected nothing after the "
                      "adapter description")
    if name in g.nodes:
        raise g.error(n, f"node {name} is listed twice (first on line {g.nodes[name].line}): "
                      "expected one capture of one fabric, not several pasted together")
    nports = int(m["nports"])
    node = RawNode(key=name, kind=kind, guid=guid, description=m["desc"], line=n,
                   nports=nports, lid=lid)
    g.nodes[name] = node
    return node


def _bad_port(g: Graph, node: RawNode, n: int, line: str) -> NoReturn:
    example = SWITCH_PORT_EXAMPLE if node.kind == "switch" else CA_PORT_EXAMPLE
    raise g.error(n, f"cannot read port line {_show(line)}: expected a line like {example!r} "
                  f"(port, peer node and port, peer description, lid, rate such as 4xHDR)")


def _bad_port_number(g: Graph, node: RawNode, n: int, port: int) -> NoReturn:
    if not 1 <= port <= (node.nports or port):
        raise g.error(n, f"port {port} of {node.description!r}: expected a port number from 1 "
                      f"to {node.nports}, the ports its node line declares")
    raise g.error(n, f"port {port} of {node.description!r} is listed twice (first on "
                  f"line {node.ports[port].line})")


def _show(line: str) -> str:
    return repr(line if len(line) <= 100 else line[:97] + "...")
