"""One InfiniBand fabric as llmgw sees it: switches by tier, hosts and their adapters,
every cable with its trained rate, the degraded ones, and rail alignment.

A `Fabric` is immutable and JSON-ready (`to_json()`); everything in it is sorted the
same way on every run, so two captures of an unchanged fabric print the same bytes
(apart from LIDs, which the subnet manager may hand out in another order).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from llmgw.fabric.graph import NodeKind
from llmgw.fabric.rates import Rate

Tier = Literal["leaf", "spine", "core"]
LinkKind = Literal["host", "switch", "other"]
TIER_ORDER: tuple[Tier, ...] = ("leaf", "spine", "core")

_DIGITS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=1 << 16)
def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort `gpu-node-2` before `gpu-node-10`, and `mlx5_2` before `mlx5_10`.
    Cached: a fabric repeats each switch name on every one of its cables."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in _DIGITS.split(text) if part)


def hexguid(guid: int | None) -> str | None:
    return None if guid is None else f"0x{guid:016x}"


def tier_of(hops: int | None) -> Tier | None:
    """Hop 1 from an adapter is a leaf, 2 a spine, 3 and beyond the core."""
    if hops is None:
        return None
    return TIER_ORDER[min(hops, 3) - 1]


@dataclass(frozen=True, slots=True)
class Switch:
    guid: int
    name: str  # the node description, as printed
    hops: int | None  # fewest cables from any host adapter; None when no adapter reaches it
    lid: int | None
    ports: int | None  # ports the switch has (not only the connected ones)

    @property
    def tier(self) -> Tier | None:
        return tier_of(self.hops)

    def to_json(self) -> dict[str, Any]:
        return {"guid": hexguid(self.guid), "name": self.name, "tier": self.tier,
                "hops": self.hops, "lid": self.lid, "ports": self.ports}


# End, Link and Adapter are named tuples, not frozen dataclasses: a fabric of 16,000
# adapters builds 160,000 of them, and a frozen dataclass sets each field through
# object.__setattr__, which made building them a fifth of the whole parse. A tuple is
# just as immutable and hashable, and is built in one step.
class End(NamedTuple):
    """One end of a cable: a port of a switch, an adapter or a router."""

    kind: NodeKind
    name: str  # node description
    port: int
    guid: int | None  # node GUID (None for adapters read from -p output)
    port_guid: int | None = None  # adapters only
    host: str | None = None
    ca: str | None = None

    @property
    def label(self) -> str:
        """How people name the port: `gpu-node-03 mlx5_1 port 1`, `MF0;leaf-02:... port 3`."""
        return f"{self.name} port {self.port}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "port": self.port,
                "guid": hexguid(self.guid), "port_guid": hexguid(self.port_guid),
                "host": self.host, "ca": self.ca}


class Link(NamedTuple):
    """A cable. For host cables `a` is the adapter end; for switch cables the lower tier."""

    a: End
    b: End
    rate: Rate
    kind: LinkKind  # host: adapter of a host to a switch; switch: switch to switch
    expected: Rate | None  # the rate most cables of this kind run at
    degraded: bool

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a.to_json(), "b": self.b.to_json(), "width": self.rate.width,
                "speed": self.rate.speed, "rate": str(self.rate), "kind": self.kind,
                "expected": _str(self.expected), "degraded": self.degraded}

    def degraded_json(self) -> dict[str, Any]:
        return {"a": self.a.label, "b": self.b.label, "rate": str(self.rate),
                "expected": _str(self.expected), "kind": self.kind}


class Adapter(NamedTuple):
    """One connected port of a host's adapter, and the switch port at its other end."""

    host: str
    ca: str  # device name from the node description, e.g. "mlx5_0"
    port: int
    rail: str  # what rails are matched on: `ca`, or `ca/port` for a second port
    guid: int | None  # node GUID (None when read from -p output)
    port_guid: int | None
    lid: int | None
    switch: str | None  # description of the switch at the other end; None when not a switch
    switch_guid: int | None
    switch_port: int | None
    peer: str  # label of the far end, whatever it is
    rate: Rate
    expected: Rate | None
    degraded: bool

    def to_json(self) -> dict[str, Any]:
        return {"ca": self.ca, "port": self.port, "rail": self.rail, "guid": hexguid(self.guid),
                "port_guid": hexguid(self.port_guid), "lid": self.lid, "switch": self.switch,
                "switch_guid": hexguid(self.switch_guid), "switch_port": self.switch_port,
                "peer": self.peer, "rate": str(self.rate), "expected": _str(self.expected),
                "degraded": self.degraded}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An adapter or router port that belongs to no host (its description is not
    `<host> <device>`), e.g. a switch's SHARP aggregation node or an appliance."""

    end: End
    peer: End

    def to_json(self) -> dict[str, Any]:
        return {**self.end.to_json(), "peer": self.peer.label,
                "peer_guid": hexguid(self.peer.guid), "peer_port": self.peer.port}


@dataclass(frozen=True, slots=True)
class Rails:
    """Whether adapter N of every host sits on the same leaf as adapter N of its peers.

    `aligned` is None when the question does not apply (no host has two adapters here);
    `reason` then says why. `problems` says, per misaligned adapter, where it is and
    where its rail is.
    """

    aligned: bool | None
    misaligned_hosts: tuple[str, ...] = ()
    reason: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        if self.aligned is None:
            return "n/a"
        return "aligned" if self.aligned else "misaligned"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "aligned": self.aligned,
                "misaligned_hosts": list(self.misaligned_hosts), "reason": self.reason,
                "problems": list(self.problems)}


@dataclass(frozen=True)
class Fabric:
    """One connected InfiniBand subnet.

    `id` is `ib-` and the lowest switch GUID in 16 hex digits (the lowest adapter GUID
    for a fabric without switches). GUIDs are burnt into the hardware, so the id stays
    the same however often the fabric is discovered and from whichever host; it only
    changes when that very switch leaves the fabric or one with a lower GUID joins.
    """

    id: str
    source: str
    format: str
    switches: tuple[Switch, ...]
    hosts: Mapping[str, tuple[Adapter, ...]]  # host -> its adapter ports, both sorted
    endpoints: tuple[Endpoint, ...]
    links: tuple[Link, ...]
    expected_rates: Mapping[LinkKind, Rate]
    rails: Rails
    notes: tuple[str, ...] = ()

    @property
    def degraded_links(self) -> tuple[Link, ...]:
        return tuple(link for link in self.links if link.degraded)

    def tier_counts(self) -> dict[str, int]:
        counts: Counter[str] = Counter(s.tier or "unreached" for s in self.switches)
        return {t: counts[t] for t in (*TIER_ORDER, "unreached") if counts[t]}

    def summary(self) -> dict[str, Any]:
        """The counts a list of fabrics shows, without writing every switch and cable out."""
        return {"switches": self.tier_counts(), "hosts": len(self.hosts),
                "adapters": sum(len(a) for a in self.hosts.values()), "links": len(self.links),
                "degraded_links": len(self.degraded_links), "rails": self.rails.status}

    def overview(self) -> dict[str, Any]:
        """Everything but the switches, hosts, endpoints and cables themselves: what the
        dashboard's fabric page says beside its drawing."""
        return {
            "id": self.id,
            "source": self.source,
            "format": self.format,
            "summary": self.summary(),
            "expected_rates": {k: str(v) for k, v in sorted(self.expected_rates.items())},
            "degraded_links": [link.degraded_json() for link in self.degraded_links],
            "rails": self.rails.to_json(),
            "notes": list(self.notes),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            **self.overview(),
            "switches": [s.to_json() for s in self.switches],
            "hosts": [{"host": h, "adapters": [a.to_json() for a in ads]}
                      for h, ads in self.hosts.items()],
            "endpoints": [e.to_json() for e in self.endpoints],
            "links": [link.to_json() for link in self.links],
        }


def _str(rate: Rate | None) -> str | None:
    return None if rate is None else str(rate)
