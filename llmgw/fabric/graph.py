"""The raw graph both text formats parse into: nodes, their connected ports, and cables.

Each cable appears twice in ibnetdiscover output, once from each end. `Graph.validate()`
refuses a half without its partner: that is how a truncated or spliced capture shows
itself, and the error names the line of the orphaned half.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from llmgw.errors import FabricError
from llmgw.fabric.rates import Rate, slower

NodeKind = Literal["switch", "ca", "router"]


@dataclass(slots=True)
class RawPort:
    port: int
    peer: str  # the key of the node at the far end
    peer_port: int
    rate: Rate
    line: int
    port_guid: int | None = None
    lid: int | None = None


@dataclass(slots=True)
class RawNode:
    key: str  # how the text refers to the node, e.g. "S-0c42a10300b10000"
    kind: NodeKind
    guid: int | None  # node GUID; None where the format does not print it (-p CAs)
    description: str
    line: int
    nports: int | None = None
    lid: int | None = None
    ports: dict[int, RawPort] = field(default_factory=dict)


class RawCable(NamedTuple):  # a tuple: one per cable, built in one step
    a: RawNode
    a_port: RawPort
    b: RawNode
    b_port: RawPort
    rate: Rate
    rates_differ: bool  # the two ends reported different rates; `rate` is the slower


@dataclass(slots=True)
class Graph:
    source: str
    format: str  # "ibnetdiscover" | "ibnetdiscover -p"
    nodes: dict[str, RawNode] = field(default_factory=dict)
    # Every cable once, in text order: found by `validate()` on the walk that checks both
    # halves of each cable anyway (a second walk cost a twentieth of the parse).
    checked: list[RawCable] | None = None

    def error(self, line: int, message: str, *, hint: str | None = None) -> FabricError:
        return FabricError(f"{self.source}, line {line}: {message}", source=self.source,
                           line=line, hint=hint)

    def validate(self) -> None:
        """Refuse what a whole capture never holds: half a cable, or a node without one.

        Every problem is collected and the first by line is raised, so the message points
        at the earliest sign of a cut-off or spliced capture."""
        problems: list[tuple[int, str]] = []
        cables: list[RawCable] = []
        nodes = self.nodes
        for node in nodes.values():
            if not node.ports:
                problems.append((node.line, f"node {node.description!r} lists no connected "
                                 "port (expected at least one port line after it: every node "
                                 "ibnetdiscover finds was reached through a cable, so the "
                                 "capture looks truncated)"))
            key = node.key
            for p in node.ports.values():
                peer = nodes.get(p.peer)
                if peer is None:
                    problems.append((p.line, f"port {p.port} of {node.description!r} connects "
                                     f"to node {p.peer} port {p.peer_port}, which the output "
                                     "never lists (expected a block for it: the capture "
                                     "looks truncated)"))
                    continue
                back = peer.ports.get(p.peer_port)
                if back is None or back.peer != key or back.peer_port != p.port:
                    found = ("lists no such port" if back is None
                             else f"says that port goes to {back.peer} port {back.peer_port}")
                    problems.append((p.line, f"port {p.port} of {node.description!r} connects "
                                     f"to {p.peer} port {p.peer_port}, but that node (line "
                                     f"{peer.line}) {found} (expected the same cable from "
                                     "both ends: the capture looks truncated or spliced)"))
                    continue
                pkey = peer.key
                if key < pkey or (key == pkey and p.port < p.peer_port):
                    # The parsers share one Rate object per distinct rate: `is` settles
                    # nearly every cable without comparing fields.
                    if p.rate is back.rate or p.rate == back.rate:
                        cables.append(RawCable(node, p, peer, back, p.rate, False))
                    else:
                        cables.append(RawCable(node, p, peer, back, slower(p.rate, back.rate),
                                               True))
        if problems:
            line, message = min(problems)
            more = len(problems) - 1
            others = f"{more} more problem{'s' if more != 1 else ''} after this one; " if more else ""
            raise self.error(line, message, hint=f"{others}capture ibnetdiscover output again, whole")
        self.checked = cables

    def cables(self) -> Iterator[RawCable]:
        """Every cable once, in text order: the ones `validate()` found (run now if it was not)."""
        if self.checked is None:
            self.validate()
        assert self.checked is not None  # validate() sets it or raises
        return iter(self.checked)
