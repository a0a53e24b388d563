"""Everything a plan is made from, gathered in one immutable bundle.

The planner is a pure function of this bundle: no files, no network, and the clock only as
the value `now` carried here. The
CLI loads it from a site (`llmgw.planner.load`); tests and the benchmark build it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from llmgw.catalog import Catalog
from llmgw.facts import HostFacts
from llmgw.inventory import Host
from llmgw.site import LOST_AFTER, UNREACHABLE_AFTER, PortRange
from llmgw.state import State


class FabricIndex(Protocol):
    """What placement asks of the InfiniBand map (`llmgw.fabric` provides the real one).

    Parameters are positional-only so any implementation's parameter names fit.
    """

    def fabrics_of(self, host: str, /) -> list[str]:
        """Ids of the fabrics `host` has an adapter on (empty: none known)."""
        ...

    def leaves_of(self, host: str, fabric_id: str, /) -> dict[str, str]:
        """Adapter name -> the leaf switch it is cabled to, on one fabric."""
        ...

    def has_degraded_link(self, host: str, fabric_id: str | None = None, /) -> bool:
        """Whether any of `host`'s cables (on one fabric, or any) trained below full rate."""
        ...

    def share_leaf(self, hosts: list[str], fabric_id: str, /) -> bool:
        """Whether every host in `hosts` hangs off one common leaf switch."""
        ...

    def rails_aligned(self, hosts: list[str], fabric_id: str, /) -> bool:
        """Whether adapter N of every host is on the same leaf as adapter N of the others."""
        ...


@dataclass(frozen=True)
class MapFabrics:
    """A fabric index from plain maps: for tests, the benchmark, and a site with no fabrics.

    `leaves` is host -> fabric id -> adapter -> leaf; `degraded` holds (host, fabric id)
    pairs with a cable below full rate.
    """

    leaves: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)
    degraded: frozenset[tuple[str, str]] = frozenset()

    def fabrics_of(self, host: str, /) -> list[str]:
        return sorted(self.leaves.get(host, {}))

    def leaves_of(self, host: str, fabric_id: str, /) -> dict[str, str]:
        return dict(self.leaves.get(host, {}).get(fabric_id, {}))

    def has_degraded_link(self, host: str, fabric_id: str | None = None, /) -> bool:
        if fabric_id is not None:
            return (host, fabric_id) in self.degraded
        return any(h == host for h, _ in self.degraded)

    def share_leaf(self, hosts: list[str], fabric_id: str, /) -> bool:
        sets = [set(self.leaves_of(h, fabric_id).values()) for h in hosts]
        return bool(sets) and bool(set.intersection(*sets))

    def rails_aligned(self, hosts: list[str], fabric_id: str, /) -> bool:
        maps = [self.leaves_of(h, fabric_id) for h in hosts]
        return bool(maps) and all(m == maps[0] for m in maps)


NO_FABRICS = MapFabrics()


@dataclass(frozen=True)
class PlanInputs:
    """The catalog, the fleet as facts and inventory describe it, and the last applied state.

    `weight_sizes` maps a model source to its size in bytes; an absent or None size
    is not known, and the disk filter then passes (unknown is not zero). `unservable`
    maps a source to the reasons the fleet's llama-server cannot load it; its llama.cpp
    profiles are then never tried.

    `now` is the clock the plan is judged at (drain deadlines; nodes unreachable, then lost,
    after `unreachable_after` and `lost_after` seconds of stale facts: llmgw.nodetime). None:
    no clock, so no deadline has passed and no node has stopped answering.
    """

    catalog: Catalog
    nodes: Mapping[str, Host]
    facts: Mapping[str, HostFacts]
    state: State
    fabrics: FabricIndex = NO_FABRICS
    ports: PortRange = field(default_factory=PortRange)
    weight_sizes: Mapping[str, int | None] = field(default_factory=dict)
    # A whole repository's selected files and their sizes, by pinned source: what an operator's
    # copy of it must hold to be served in place (llmgw.weights.present).
    weight_files: Mapping[str, Mapping[str, int | None]] = field(default_factory=dict)
    # A PEFT adapter's LoRA rank (adapter_config.json `r`), by source, where `catalog validate`
    # read it: a new replica's engine sizes its LoRA slots by its adapters' largest (vLLM).
    adapter_ranks: Mapping[str, int] = field(default_factory=dict)
    unservable: Mapping[str, Sequence[str]] = field(default_factory=dict)
    now: datetime | None = None
    unreachable_after: int = UNREACHABLE_AFTER
    lost_after: int = LOST_AFTER

    def next_change(self) -> datetime | None:
        """The first moment after `now` at which the clock alone changes the plan: a drain
        deadline passing, a node with stale facts turning unreachable or lost (llmgw.nodetime).
        None without a clock or when nothing is due."""
        if self.now is None:
            return None
        now = self.now
        due = [h.drain_deadline for h in self.nodes.values()
               if h.node_state == "draining" and h.drain_deadline is not None]
        for name in self.nodes:
            f = self.facts.get(name)
            if f is not None and f.stale_since is not None:
                due += [f.stale_since + timedelta(seconds=s) for s in (self.unreachable_after, self.lost_after)]
        later = [t for t in due if t > now]
        return min(later) if later else None
