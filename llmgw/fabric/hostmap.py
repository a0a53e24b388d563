"""`HostFabricMap`: what placement asks of the fabrics, in plain data, memoised between plans.

A `FabricIndex` holds whole fabrics (every switch and cable) for the views. Placement
asks only five questions per host, answered here from a few tuples per host, exactly
as `FabricIndex` answers them (the same host-name matching, rail order and GUIDs). Being
plain data, it is cheap to keep in a memo keyed by the ibnetdiscover texts it came from,
so a plan of a large fleet does not parse megabytes of text that did not change. It also
carries each fabric's glance (`FabricGlance`: what `llmgw status` says of it), so the
fleet at a glance does not load every switch and cable either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmgw.errors import FabricError
from llmgw.fabric.rails import sets_aligned
from llmgw.facts import HostFacts
from llmgw.facts.digest import text_digest

# Per host and fabric: (rail, leaf name, leaf GUID) of each adapter cabled to a switch, in
# rail order, and whether any of the host's own cables there trained below full rate.
Places = tuple[tuple[str, str, int], ...]
HostEntry = dict[str, tuple[Places, bool]]


@dataclass(frozen=True)
class FabricGlance:
    """One fabric in a line: how many switches and degraded cables, and its rails' status."""

    switches: int
    degraded_links: int
    rails: str


@dataclass(frozen=True)
class HostFabricMap:
    glances: dict[str, FabricGlance]  # every fabric id -> its glance, in the index's order
    hosts: dict[str, HostEntry]  # host as the fabric names it -> fabric id -> entry
    short: dict[str, tuple[str, ...]]  # short name -> the fabric's host names with it

    def fabrics_of(self, host: str, /) -> list[str]:
        name = self._host(host)
        return sorted(self.hosts[name]) if name else []

    def leaves_of(self, host: str, fabric_id: str, /) -> dict[str, str]:
        return {rail: leaf for rail, leaf, _ in self._places(host, fabric_id)}

    def has_degraded_link(self, host: str, fabric_id: str | None = None, /) -> bool:
        name = self._host(host)
        ids = [fabric_id] if fabric_id is not None else self.fabrics_of(host)
        for fid in ids:
            self._fabric(fid)
            entry = self.hosts[name].get(fid) if name else None
            if entry is not None and entry[1]:
                return True
        return False

    def share_leaf(self, hosts: Iterable[str], fabric_id: str, /) -> bool:
        common: set[int] | None = None
        for host in hosts:
            leaves = {guid for _, _, guid in self._places(host, fabric_id)}
            common = leaves if common is None else common & leaves
            if not common:
                return False
        return True

    def rails_aligned(self, hosts: Iterable[str], fabric_id: str, /) -> bool:
        return sets_aligned([{rail: guid for rail, _, guid in self._places(h, fabric_id)} for h in hosts])

    def _fabric(self, fabric_id: str) -> None:
        if fabric_id not in self.glances:
            raise FabricError(f"no fabric {fabric_id!r} (known: {', '.join(sorted(self.glances)) or 'none'})",
                              fabric=fabric_id)

    def _host(self, host: str) -> str | None:
        if host in self.hosts:
            return host
        short = host.split(".")[0]
        if short in self.hosts:
            return short
        names = self.short.get(short, ())
        return names[0] if len(names) == 1 else None

    def _places(self, host: str, fabric_id: str) -> Places:
        self._fabric(fabric_id)
        name = self._host(host)
        entry = self.hosts[name].get(fabric_id) if name else None
        return entry[0] if entry is not None else ()


def capture_key(facts: Iterable[HostFacts]) -> tuple[tuple[str, float, str], ...]:
    """What a fabric map is made from: each capture's host, time and text digest, in the
    order `fabrics_from_facts` reads them (newest last)."""
    # A few hosts of thousands carry a capture: sort those only.
    captures = sorted(((f, f.ibnetdiscover) for f in facts if f.ibnetdiscover is not None),
                      key=lambda c: (c[0].gathered_at.timestamp(), c[0].host))
    # Tens of megabytes of text at 4,096 hosts: digests the facts memo made are not made again.
    return tuple((f.host, f.gathered_at.timestamp(), text_digest(text)) for f, text in captures)
