"""Whose weights are where: per catalog model the nodes holding them, per node what it holds.

"Holds" is the planner's own judgement (`Fleet.holders`): llmgw's cache entry, or an
operator's copy it serves in place (llmgw.weights.present) — the nodes where apply would
download nothing. So `status`, `fabrics`, `nodes --json` and the dashboard say what the
plan acts on, not a second guess at it: the bastion judges it with the planner
(llmgw.views.planned.held_by_plan) and the routers get it in their placement. From facts
only: a host that did not report its weights holds nothing known (its node's `weights` is None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llmgw.views.placement import Held


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
