"""Weighted routes in the plan: the record routers read, and the split as the plan says it.

A route runs nothing, so it has no replicas to place: it reaches the routers as a model
record with `route` set (state/model.py), and a change of its split is an in-place update
whose reason reads `split qwen3-8b 90%, qwen3-8b-2511 10% -> qwen3-8b 50%, ...`.
"""

from __future__ import annotations

from llmgw.catalog import Route
from llmgw.state import ModelRecord, RouteGuardRecord, RouteRecord, RouteTargetRecord, ScalingRecord

# A route has no replicas of its own: nothing to keep, start or stop (the router never starts one
# for it; llmgw/router/table.py's ModelEntry.on_demand is false for a route).
_NO_REPLICAS = ScalingRecord(min=0, max=0, idle_timeout=0)


def route_record(route: Route) -> ModelRecord:
    g = route.guard
    guard = None if g is None else RouteGuardRecord(
        max_error_ppm=None if g.max_error_rate is None else max(1, round(g.max_error_rate * 1_000_000)),
        max_ttft_p90_ms=None if g.max_ttft_p90 is None else max(1, round(g.max_ttft_p90 * 1000)),
        window=g.window, min_requests=g.min_requests)
    return ModelRecord(name=route.name, aliases=list(route.aliases), fallbacks=list(route.fallbacks),
                       scaling=_NO_REPLICAS,
                       route=RouteRecord(targets=[RouteTargetRecord(model=t.model, weight=t.weight)
                                                  for t in route.routes], guard=guard))


def split_text(record: RouteRecord | None) -> str:
    """`qwen3-8b 90%, qwen3-8b-2511 10%`; `none` for a model that is not a route."""
    if record is None:
        return "none"
    return ", ".join(f"{t.model} {t.weight}%" for t in record.targets)


def guard_text(record: RouteRecord | None) -> str:
    g = record.guard if record is not None else None
    if g is None:
        return "none"
    limits = []
    if g.max_error_ppm is not None:
        limits.append(f"errors <= {g.max_error_ppm / 10_000:g}%")
    if g.max_ttft_p90_ms is not None:
        limits.append(f"TTFT p90 <= {g.max_ttft_p90_ms / 1000:g} s")
    return f"{' and '.join(limits)} over {g.window} s (at least {g.min_requests} requests)"


def route_change(old: RouteRecord | None, new: RouteRecord | None) -> list[str]:
    """What changed in a route, before -> after: its split, then its guard."""
    parts = []
    if split_text(old) != split_text(new):
        parts.append(f"split {split_text(old)} -> {split_text(new)}")
    if guard_text(old) != guard_text(new):
        parts.append(f"guard {guard_text(old)} -> {guard_text(new)}")
    return parts
