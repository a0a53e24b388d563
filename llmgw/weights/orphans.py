"""Orphaned weights: llmgw cache entries on a host that nothing wants any more.

Computed exactly, not guessed: a cache entry's name is a hash of its source, so the
wanted set follows from the catalog's sources (and, for replicas still recorded in the
state, their models' sources). Entries without llmgw's cache name are an operator's
and are never listed. Hosts re-check every name before removing it (the `weights`
module), so a stale facts cache can make llmgw ask too much, never remove too much.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from llmgw.catalog import Catalog
from llmgw.facts import HostFacts
from llmgw.state import State
from llmgw.weights.names import cache_name, source_basename


@dataclass(frozen=True)
class Orphan:
    host: str
    name: str
    path: str
    size_bytes: int


def catalog_names(catalog: Catalog) -> set[str]:
    """Cache names of every source the catalog names: models and their LoRA adapters."""
    return {cache_name(m.source) for m in catalog} | {cache_name(a.source) for m in catalog for a in m.adapters}


def state_wants(catalog: Catalog, state: State) -> dict[str, list[str]]:
    """Cache name -> the recorded replicas that still need it (their own source, and their model's now)."""
    # A replica of a model removed from the catalog keeps its weights until apply destroys it.
    by_model = {m.name: m.source for m in catalog}
    out: dict[str, list[str]] = {}
    for r in state.replicas:
        names = {cache_name(by_model[r.model])} if r.model in by_model else set()
        names |= {r.cache_name} if r.cache_name else set()
        names |= {a.cache_name for a in r.adapters if a.cache_name}  # what its engine loaded at start
        for n in names:
            out.setdefault(n, []).append(r.id)
    return {n: sorted(ids) for n, ids in out.items()}


def wanted_names(catalog: Catalog, state: State) -> set[str]:
    """Cache names of every source the catalog or a recorded replica still needs."""
    return catalog_names(catalog) | set(state_wants(catalog, state))


def spare_unpinned(found: Mapping[str, list[Orphan]], unpinned: Iterable[str]) -> dict[str, list[Orphan]]:
    """`found` without any entry that may hold a whole repository the catalog names but no
    `catalog validate` pinned yet (its commit, hence its cache name, is not known here):
    every entry named after that repository is kept, rather than guessed away."""
    tails = {"-" + source_basename(s) for s in unpinned}
    out = {h: [o for o in entries if not any(o.name.endswith(t) for t in tails)] for h, entries in found.items()}
    return {h: entries for h, entries in out.items() if entries}


def find_orphans(facts: Mapping[str, HostFacts], wanted: set[str]) -> dict[str, list[Orphan]]:
    """Host -> its orphaned cache entries, from the facts cache (hosts with none are left out)."""
    out: dict[str, list[Orphan]] = {}
    for host in sorted(facts):
        entries = [Orphan(host, w.cache_name, w.path, w.size_bytes) for w in facts[host].weights or []
                   if w.cache and w.cache_name and w.cache_name not in wanted]
        if entries:
            out[host] = sorted(entries, key=lambda o: o.name)
    return out
