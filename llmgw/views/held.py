"""Whose weights are where: per catalog model the nodes holding them, per node what it holds.

"Holds" is the planner's own judgement (`Fleet.holders`): llmgw's cache entry, or an
operator's copy it serves in place (llmgw.weights.present) — the nodes where apply would
download nothing. So `status`, `fabrics`, `nodes --json` and the dashboard say what the
plan acts on, not a second guess at it. From facts only: a host that did not report its
weights holds nothing known (its node's `weights` is None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmgw.planner.fleet import Fleet
from llmgw.views.sitedata import SiteData
from llmgw.weights.names import cache_name


@dataclass(frozen=True)
class Held:
    nodes_of: dict[str, list[str]]  # model -> the nodes holding its weights, in name order
    at: dict[str, dict[str, list[str]]]  # node -> path of the weights there -> the models served from it


def weights_held(data: SiteData) -> Held:
    inp = data.inputs  # the catalog as planned: whole repositories pinned to their commit
    fleet = Fleet(inp.nodes, inp.facts, inp.fabrics, inp.ports, inp.weight_sizes, inp.weight_files)
    nodes_of: dict[str, list[str]] = {}
    at: dict[str, dict[str, list[str]]] = {}
    for m in inp.catalog:
        name = cache_name(m.source)
        for n in fleet.holders(m.source, name):
            path = fleet.copy_at(n, m.source, name) or next(
                w.path for w in (n.facts.weights if n.facts else None) or [] if w.cache_name == name)
            nodes_of.setdefault(m.name, []).append(n.name)
            at.setdefault(n.name, {}).setdefault(path, []).append(m.name)
    return Held(nodes_of, at)


def per_fabric(held: Held, members: Iterable[str]) -> list[dict[str, Any]]:
    """The models whose weights some of `members` (a fabric's nodes) hold, each with how many."""
    inside = set(members)
    counts = {m: sum(1 for n in nodes if n in inside) for m, nodes in held.nodes_of.items()}
    return [{"model": m, "nodes": c} for m, c in sorted(counts.items()) if c]


def per_fabric_text(weights: list[dict[str, Any]], total: int) -> str:
    """`qwen2.5-7b on 2 of 4 nodes, llama on 4 of 4 nodes` (or `none present`): one line per fabric."""
    if not weights:
        return "none present"
    nodes = "node" if total == 1 else "nodes"
    return ", ".join(f"{w['model']} on {w['nodes']} of {total} {nodes}" for w in weights)


def node_weights(held: Held, node: str, reported: Mapping[str, tuple[int, bool]] | None) -> list[dict[str, Any]] | None:
    """A node's weights as `nodes --json` lists them: every entry its facts report (path -> size,
    cache), with the catalog models served from it; None when the host did not report any."""
    if reported is None:
        return None
    models = held.at.get(node, {})
    return [{"path": path, "size_bytes": size, "cache": cache, "models": sorted(models.get(path, []))}
            for path, (size, cache) in sorted(reported.items())]
