"""Gather a site's plan inputs from disk: catalog, inventory, facts cache, fabrics, state, sizes.

This is the planner's only impure part; everything after it is a function of what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from llmgw import collector
from llmgw.catalog import load_catalog
from llmgw.fabric import FabricIndex as RealFabricIndex
from llmgw.fabric import fabrics_from_facts
from llmgw.fabric.hostmap import HostFabricMap, capture_key
from llmgw.facts import memo
from llmgw.facts.cache import MEMO_MIN_FILES, read_facts
from llmgw.facts.records import HostFacts
from llmgw.inventory import load_inventory
from llmgw.planner.inputs import FabricIndex, PlanInputs
from llmgw.site import Site
from llmgw.state import State, backend_for
from llmgw.weights.check import pin_catalog, unservable_sources
from llmgw.weights.sources import read_sources


def fabric_index(facts: Iterable[HostFacts]) -> FabricIndex:
    """The fabric map built from the facts' ibnetdiscover text."""
    return fabrics_from_facts(list(facts))


# The modules whose code decides what a memoised fabric map says: a change to one is a miss.
_FABRIC_MODULES = ("llmgw.fabric.topology_text", "llmgw.fabric.ports_text", "llmgw.fabric.graph",
                   "llmgw.fabric.build", "llmgw.fabric.rails", "llmgw.fabric.rates", "llmgw.fabric.structure",
                   "llmgw.fabric.index", "llmgw.fabric.hostmap")


def placement_fabrics(facts: Mapping[str, HostFacts], where: Path, *, memo_min: int = MEMO_MIN_FILES) -> HostFabricMap:
    """What placement asks of the fabrics; memoised by the captures' digests on a fleet of
    `memo_min` hosts or more (parsing a large fabric's text costs seconds, hashing it little)."""
    if len(facts) < memo_min:
        return fabrics_from_facts(list(facts.values())).host_map()
    key = (memo.code_version(_FABRIC_MODULES), capture_key(facts.values()))
    found = memo.load("fabrics", where, key)
    if isinstance(found, HostFabricMap):
        return found
    mapped = fabrics_from_facts(list(facts.values())).host_map()
    memo.store("fabrics", where, key, mapped)
    return mapped


def memo_fabric_index(facts: Mapping[str, HostFacts], where: Path, *,
                      memo_min: int = MEMO_MIN_FILES) -> RealFabricIndex:
    """The whole fabric index (every switch and cable, for the views), memoised like
    `placement_fabrics`; a text that does not parse raises FabricError every time."""
    if len(facts) < memo_min:
        return fabrics_from_facts(list(facts.values()))
    key = (memo.code_version(_FABRIC_MODULES), capture_key(facts.values()))
    found = memo.load("fabric-index", where, key)
    if isinstance(found, RealFabricIndex):
        return found
    index = fabrics_from_facts(list(facts.values()))
    memo.store("fabric-index", where, key, index)
    return index


def weight_sizes(facts_dir: Path) -> dict[str, int | None]:
    """Source -> size in bytes, from the sources the weights package inspected (offline);
    a whole repository under its pinned spec too (the source the pinned catalog names)."""
    sizes: dict[str, int | None] = {}
    for src, info in sorted(read_sources(facts_dir).items()):
        sizes[src] = info.size_bytes
        if info.pinned:
            sizes[info.pinned] = info.size_bytes
    return sizes


def _read_state(site: Site) -> State:
    """The newest state from the site's backend (a file, or PostgreSQL)."""
    with backend_for(site) as backend:
        return backend.read()


def load_inputs(site: Site, *, memo_min: int = MEMO_MIN_FILES) -> PlanInputs:
    """The plan's inputs; parsed facts and fabric maps of large fleets come from the memo
    (`llmgw.facts.memo`) when their files did not change: the plan is the same either way."""
    with collector.paused():  # thousands of facts records, no cycles (llmgw.collector)
        return _load_inputs(site, memo_min=memo_min)


def _load_inputs(site: Site, *, memo_min: int) -> PlanInputs:
    # Whole Hugging Face repositories reach the planner pinned to the commit validate resolved.
    catalog, unpinned = pin_catalog(load_catalog(site.catalog_dir, root=site.root), site)
    inventory = load_inventory(site.inventory)
    facts = read_facts(site.facts_dir, memo_min=memo_min)
    nodes = inventory.nodes
    return PlanInputs(
        catalog=catalog, nodes=nodes, facts={h: f for h, f in facts.items() if h in nodes},
        state=_read_state(site), fabrics=placement_fabrics(facts, site.facts_dir.resolve(), memo_min=memo_min),
        ports=site.config.ports,
        weight_sizes=weight_sizes(site.facts_dir), unservable={**unservable_sources(site), **unpinned})
