"""Writing ibnetdiscover text for a fabric described in code.

Real captures need InfiniBand hardware or the ibsim simulator; tests, the benchmark
and the lab (whose hosts have no InfiniBand) need fabrics of any shape and size. This
writes both formats exactly as infiniband-diags 44 does (the tests prove it by
rebuilding a real capture byte for byte), so whatever parses these parses the real thing.

    fab = SynthFabric()
    leaf = fab.switch("MF0;leaf-01:MQM8790/U1", 0x0C42A10300B10000)
    hca = fab.ca("gpu-node-01 mlx5_0", 0xB83FD20300A10000)
    fab.connect(leaf, 1, hca, 1)            # 4xHDR unless told otherwise
    text = fab.topology()                   # or fab.ports_report() for -p
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

_RATE = re.compile(r"^(\d+x|\?\?)(\w+|\?\?\?)$")
SWITCH_DEVID = 0xD2F0  # Quantum QM8790, as in the shared fixtures
CA_DEVID = 0x101B  # ConnectX-6
MELLANOX = 0x2C9


@dataclass(eq=False)
class SynthNode:
    kind: Literal["switch", "ca"]
    guid: int
    description: str
    nports: int
    lid: int
    devid: int
    vendid: int = MELLANOX
    # port -> (peer, peer port, rate such as "4xHDR")
    links: dict[int, tuple[SynthNode, int, str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f'"{"S" if self.kind == "switch" else "H"}-{self.guid:016x}"'

    @property
    def port_guid(self) -> int:
        """What ibsim does: a switch's ports share its GUID, an adapter's port is GUID+1."""
        return self.guid if self.kind == "switch" else self.guid + 1


@dataclass
class SynthFabric:
    generated: str = "Mon Nov 30 04:42:18 2026"  # ctime() of the header
    nodes: list[SynthNode] = field(default_factory=list)
    _next_lid: int = 1

    def _lid(self, lid: int | None) -> int:
        if lid is None:
            lid = self._next_lid
        self._next_lid = max(self._next_lid, lid + 1)
        return lid

    def switch(self, description: str, guid: int, *, ports: int = 40,
               lid: int | None = None) -> SynthNode:
        node = SynthNode("switch", guid, description, ports, self._lid(lid), SWITCH_DEVID)
        self.nodes.append(node)
        return node

    def ca(self, description: str, guid: int, *, ports: int = 1,
           lid: int | None = None) -> SynthNode:
        node = SynthNode("ca", guid, description, ports, self._lid(lid), CA_DEVID)
        self.nodes.append(node)
        return node

    def connect(self, a: SynthNode, a_port: int, b: SynthNode, b_port: int,
                rate: str = "4xHDR") -> None:
        if not _RATE.match(rate):
            raise ValueError(f"rate {rate!r}: expected width and speed such as 4xHDR")
        for node, port in ((a, a_port), (b, b_port)):
            if not 1 <= port <= node.nports or port in node.links:
                raise ValueError(f"port {port} of {node.description} is taken or absent")
        a.links[a_port] = (b, b_port, rate)
        b.links[b_port] = (a, a_port, rate)

    def retrain(self, a: SynthNode, a_port: int, rate: str) -> None:
        """Give an existing cable another active rate (a degraded or upgraded link)."""
        peer, pport, _ = a.links[a_port]
        a.links[a_port] = (peer, pport, rate)
        peer.links[pport] = (a, a_port, rate)

    # -- the default format --------------------------------------------------------

    def topology(self, initiated_from: SynthNode | None = None) -> str:
        """`ibnetdiscover` output: switches first, then adapters, each in creation order."""
        start = initiated_from or next(n for n in self.nodes if n.kind == "ca")
        out = [f"#\n# Topology file: generated on {self.generated}\n#\n",
               f"# Initiated from node {start.guid:016x} port {start.port_guid:016x}\n"]
        for node in [n for n in self.nodes if n.kind == "switch"] + \
                [n for n in self.nodes if n.kind == "ca"]:
            out.append(f"\nvendid=0x{node.vendid:x}\ndevid=0x{node.devid:x}\n"
                       f"sysimgguid=0x{node.guid:x}\n")
            if node.kind == "switch":
                out.append(f"switchguid=0x{node.guid:x}({node.port_guid:x})\n"
                           f"Switch\t{node.nports} {node.name}\t\t# \"{node.description}\" "
                           f"enhanced port 0 lid {node.lid} lmc 0\n")
                for port, (peer, pport, rate) in sorted(node.links.items()):
                    pguid = f"({peer.port_guid:x}) " if peer.kind != "switch" else ""
                    out.append(f"[{port}]\t{peer.name}[{pport}]{pguid}\t\t"
                               f"# \"{peer.description}\" lid {peer.lid} {rate}\n")
            else:
                out.append(f"caguid=0x{node.guid:x}\n"
                           f"Ca\t{node.nports} {node.name}\t\t# \"{node.description}\"\n")
                for port, (peer, pport, rate) in sorted(node.links.items()):
                    pguid = f" ({peer.port_guid:x}) " if peer.kind != "switch" else ""
                    out.append(f"[{port}]({node.port_guid:x}) \t{peer.name}[{pport}]{pguid}\t\t"
                               f"# lid {node.lid} lmc 0 \"{peer.description}\" lid {peer.lid} "
                               f"{rate}\n")
        return "".join(out)

    # -- the -p format -------------------------------------------------------------

    def ports_report(self) -> str:
        """`ibnetdiscover -p` output: every port of every node, highest port first;
        a switch port with no cable shows as `4x SDR` with no peer, as in ibsim."""
        out: list[str] = []
        for node in self.nodes:
            for port in range(node.nports, 0, -1):
                link = node.links.get(port)
                if link is None and node.kind != "switch":
                    continue
                rate = link[2] if link else "4xSDR"
                m = _RATE.match(rate)
                assert m is not None
                kind = "SW" if node.kind == "switch" else "CA"
                head = f"{kind:>2} {node.lid:5d} {port:2d} 0x{node.port_guid:016x} {m[1]} {m[2]}"
                if link is None:
                    out.append(f"{head}{'':36s}'{node.description}'\n")
                    continue
                peer, pport, _ = link
                pkind = "SW" if peer.kind == "switch" else "CA"
                out.append(f"{head} - {pkind:>2} {peer.lid:5d} {pport:2d} 0x{peer.port_guid:016x}"
                           f" ( '{node.description}' - '{peer.description}' )\n")
        return "".join(out)
