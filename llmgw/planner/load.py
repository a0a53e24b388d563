"""Gather a site's plan inputs from disk: catalog, inventory, facts cache, fabrics, state, sizes.

This is the planner's only impure part; everything after it is a function of what it returns.
The facts cache reader comes from the facts package when present; until then a small
reader of `<facts>/*.json` stands in.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

from pydantic import ValidationError

from llmgw.catalog import load_catalog
from llmgw.errors import FactsError
from llmgw.fabric import fabrics_from_facts
from llmgw.facts.model import HostFacts
from llmgw.inventory import load_inventory
from llmgw.planner.inputs import FabricIndex, PlanInputs
from llmgw.site import Site
from llmgw.state import read_state
from llmgw.weights.sources import read_sources


def _read_facts_files(facts_dir: Path) -> dict[str, HostFacts]:
    out: dict[str, HostFacts] = {}
    if not facts_dir.is_dir():
        return out
    for path in sorted(facts_dir.glob("*.json")):
        try:
            facts = HostFacts.model_validate_json(path.read_text(encoding="utf-8"))
        except (ValidationError, OSError) as exc:
            raise FactsError(f"{path} is not a llmgw facts document: {str(exc).splitlines()[0]}",
                             hint="gather it again with `llmgw facts --limit HOST`, or delete it") from None
        out[facts.host] = facts
    return out


def read_facts(facts_dir: Path) -> dict[str, HostFacts]:
    """Every host's facts in the cache; the facts package's reader when it exists."""
    try:
        cache = importlib.import_module("llmgw.facts.cache")
    except ImportError:
        return _read_facts_files(facts_dir)
    reader = cast(Callable[[Path], dict[str, HostFacts]], cache.read_facts)
    return reader(facts_dir)


def fabric_index(facts: Iterable[HostFacts]) -> FabricIndex:
    """The fabric map built from the facts' ibnetdiscover text."""
    return fabrics_from_facts(list(facts))


def weight_sizes(facts_dir: Path) -> dict[str, int | None]:
    """Source -> size in bytes, from the sources the weights package inspected (offline)."""
    return {src: info.size_bytes for src, info in sorted(read_sources(facts_dir).items())}


def load_inputs(site: Site) -> PlanInputs:
    catalog = load_catalog(site.catalog_dir, root=site.root)
    inventory = load_inventory(site.inventory)
    facts = read_facts(site.facts_dir)
    nodes = inventory.nodes
    return PlanInputs(
        catalog=catalog, nodes=nodes, facts={h: f for h, f in facts.items() if h in nodes},
        state=read_state(site.state_file), fabrics=fabric_index(facts.values()), ports=site.config.ports,
        weight_sizes=weight_sizes(site.facts_dir))
