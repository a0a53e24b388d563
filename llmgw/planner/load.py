"""Gather a site's plan inputs from disk: catalog, inventory, facts cache, fabrics, state, sizes.

This is the planner's only impure part; everything after it is a function of what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from llmgw.catalog import load_catalog
from llmgw.fabric import fabrics_from_facts
from llmgw.facts.cache import read_facts
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


def load_inputs(site: Site) -> PlanInputs:
    # Whole Hugging Face repositories reach the planner pinned to the commit validate resolved.
    catalog, unpinned = pin_catalog(load_catalog(site.catalog_dir, root=site.root), site)
    inventory = load_inventory(site.inventory)
    facts = read_facts(site.facts_dir)
    nodes = inventory.nodes
    return PlanInputs(
        catalog=catalog, nodes=nodes, facts={h: f for h, f in facts.items() if h in nodes},
        state=_read_state(site), fabrics=fabric_index(facts.values()), ports=site.config.ports,
        weight_sizes=weight_sizes(site.facts_dir), unservable={**unservable_sources(site), **unpinned})
