"""`FabricIndex`: the questions placement asks about fabrics, answered per host.

For a host: which fabrics it is on, which leaf each of its adapters hangs off, whether
any of its own cables trained below the rate of its peers. For a set of hosts: whether
they share a leaf, and whether their rails line up. Switches are compared by GUID, never
by name: many fabrics have switches that all carry the same factory description.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from llmgw.errors import FabricError
from llmgw.fabric.hostmap import FabricGlance, HostEntry, HostFabricMap
from llmgw.fabric.parse import parse_ibnetdiscover
from llmgw.fabric.rails import rail_places, sets_aligned
from llmgw.fabric.structure import Adapter, Fabric, natural_key
from llmgw.facts import HostFacts
from llmgw.ibref import find_fabric_id


@dataclass
class FabricIndex:
    fabrics: dict[str, Fabric]  # by id, sorted
    _adapters: dict[str, dict[str, tuple[Adapter, ...]]] = field(
        default_factory=dict, repr=False)  # host -> fabric id -> its adapter ports there
    _short: dict[str, set[str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for fid, fabric in self.fabrics.items():
            for host, adapters in fabric.hosts.items():
                self._adapters.setdefault(host, {})[fid] = adapters
                self._short.setdefault(host.split(".")[0], set()).add(host)

    @classmethod
    def from_fabrics(cls, fabrics: Iterable[Fabric]) -> FabricIndex:
        """One entry per fabric. Two captures of one fabric share their id, or at least a
        switch (a switch lives in exactly one subnet), and the *later* one given wins:
        pass captures oldest first."""
        chosen: dict[str, Fabric] = {}
        owner: dict[int, str] = {}  # switch GUID -> id of the fabric holding it
        for fabric in fabrics:
            replaced = {owner[s.guid] for s in fabric.switches if s.guid in owner}
            if fabric.id in chosen:
                replaced.add(fabric.id)
            for fid in replaced:
                for s in chosen.pop(fid).switches:
                    owner.pop(s.guid, None)
            chosen[fabric.id] = fabric
            for s in fabric.switches:
                owner[s.guid] = fabric.id
        return cls(dict(sorted(chosen.items())))

    # -- lookups ---------------------------------------------------------------------

    def find(self, ref: str) -> Fabric:
        """A fabric by id, by unique id prefix, or by its GUID with or without `ib-` (llmgw.ibref)."""
        return self.fabrics[find_fabric_id(ref, self.fabrics)]

    def hosts(self, fabric_id: str) -> list[str]:
        """Every host with an adapter on the fabric, sorted."""
        return list(self._fabric(fabric_id).hosts)

    def fabrics_of(self, host: str) -> list[str]:
        """Ids of the fabrics the host has adapters on, sorted."""
        name = self._host(host)
        return sorted(self._adapters[name]) if name else []

    def leaves_of(self, host: str, fabric_id: str) -> dict[str, str]:
        """Adapter name (`mlx5_0`) -> name of the leaf switch it is cabled to. Empty when
        the host has no adapter on the fabric; adapters cabled to no switch are left out."""
        return {rail: a.switch for rail, a in self._places(host, fabric_id).items()
                if a.switch is not None}

    def has_degraded_link(self, host: str, fabric_id: str | None = None) -> bool:
        """Whether any cable from the host's own adapters trained below its peers' rate
        (on one fabric, or on any when `fabric_id` is None). Switch-to-switch cables are
        shared by everyone under a leaf, so they are the fabric's, not the host's."""
        name = self._host(host)
        ids = [fabric_id] if fabric_id is not None else self.fabrics_of(host)
        for fid in ids:
            self._fabric(fid)
            if name and any(a.degraded for a in self._adapters[name].get(fid, ())):
                return True
        return False

    def share_leaf(self, hosts: Iterable[str], fabric_id: str) -> bool:
        """Whether one leaf switch has an adapter of every host (vacuously true for none)."""
        common: set[int] | None = None
        for host in hosts:
            leaves = {a.switch_guid for a in self._places(host, fabric_id).values()
                      if a.switch_guid is not None}
            common = leaves if common is None else common & leaves
            if not common:
                return False
        return True

    def rails_aligned(self, hosts: Iterable[str], fabric_id: str) -> bool:
        """Whether the hosts have the same adapter names here and each name is on one leaf
        for all of them (vacuously true for none; false for a host not on the fabric)."""
        places = [{rail: a.switch_guid for rail, a in self._places(h, fabric_id).items()
                   if a.switch_guid is not None} for h in hosts]
        return sets_aligned(places)

    def host_map(self) -> HostFabricMap:
        """The same answers for placement, as plain data (see `llmgw.fabric.hostmap`)."""
        hosts: dict[str, HostEntry] = {}
        for name, per_fabric in self._adapters.items():
            hosts[name] = {fid: (tuple((rail, a.switch, a.switch_guid) for rail, a in self._places(name, fid).items()
                                       if a.switch is not None and a.switch_guid is not None),
                                 any(a.degraded for a in adapters))
                           for fid, adapters in per_fabric.items()}
        return HostFabricMap({fid: FabricGlance(len(f.switches), len(f.degraded_links), f.rails.status)
                              for fid, f in self.fabrics.items()}, hosts,
                             {short: tuple(sorted(names)) for short, names in self._short.items()})

    # -- helpers ---------------------------------------------------------------------

    def _fabric(self, fabric_id: str) -> Fabric:
        fabric = self.fabrics.get(fabric_id)
        if fabric is None:
            raise FabricError(f"no fabric {fabric_id!r} (known: "
                              f"{', '.join(self.fabrics) or 'none'})", fabric=fabric_id)
        return fabric

    def _host(self, host: str) -> str | None:
        """The host as the fabric names it: exactly, else by short name when unambiguous
        (inventories say `gpu-01` where adapters say `gpu-01.cluster`, or the reverse)."""
        if host in self._adapters:
            return host
        short = host.split(".")[0]
        if short in self._adapters:
            return short
        names = self._short.get(short, set())
        return next(iter(names)) if len(names) == 1 else None

    def _places(self, host: str, fabric_id: str) -> dict[str, Adapter]:
        self._fabric(fabric_id)
        name = self._host(host)
        if name is None:
            return {}
        places = rail_places(self._adapters[name].get(fabric_id, ()))
        return dict(sorted(places.items(), key=lambda kv: natural_key(kv[0])))


def fabrics_from_facts(facts: Iterable[HostFacts]) -> FabricIndex:
    """Parse every host's `ibnetdiscover` text and index the fabrics, newest capture
    winning when two hosts captured the same fabric. A text that cannot be read raises
    `FabricError` naming the host and line: a fabric silently missing would mislead."""
    with_text = sorted((f for f in facts if f.ibnetdiscover is not None),
                       key=lambda f: (f.gathered_at.timestamp(), f.host))
    fabrics: list[Fabric] = []
    for f in with_text:
        assert f.ibnetdiscover is not None
        fabrics.extend(parse_ibnetdiscover(f.ibnetdiscover, source=f"ibnetdiscover from {f.host}"))
    return FabricIndex.from_fabrics(fabrics)
