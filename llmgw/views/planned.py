"""The bastion's way to load a site for the views: what cannot be placed, planned by the planner.

`llmgw status`, `models`, `nodes`... run where the site is, and plan with the planner
itself, so "cannot be placed" in a view is what `llmgw plan` would say, not a second
opinion. Apply plans the same way for the routers and ships the result (`site_copy_files`:
what cannot be placed and the fleet in numbers, into the site copy llmgw.apply.dashboard_site
packs): the router process never imports this module (tests/maintenance/test_router_closure.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from llmgw import collector
from llmgw.errors import FabricError, LlmgwError, PlanError
from llmgw.fabric import FabricIndex
from llmgw.fabric.hostmap import HostFabricMap
from llmgw.facts import HostFacts
from llmgw.fleetfile import FLEET_FILE
from llmgw.planner import Plan, PlanInputs, make_plan
from llmgw.planner.fleet import Fleet  # not in the planner's front door: its rule for weights present
from llmgw.planner.load import memo_fabric_index, placement_fabrics, weight_files, weight_sizes
from llmgw.site import Site, site_clock
from llmgw.views.fabric_copy import FABRICS_FILE, FabricMap, FabricsCopy, FabricViews
from llmgw.views.fabrics import LiveFabrics, fabric_copy_files
from llmgw.views.fleet import summarise
from llmgw.views.placement import PLACEMENT_FILE, Held, Pin, Placement, Unplaced, unknown_placement
from llmgw.views.sitedata import Loaders, SiteData
from llmgw.views.sitedata import load_site_data as _load
from llmgw.weights.check import model_spec, pin_catalog, unservable_sources
from llmgw.weights.names import cache_name
from llmgw.weights.sources import read_sources


def plan_inputs(data: SiteData) -> PlanInputs:
    """What `plan` is made from (its `facts`: the inventory nodes' only). Planned as
    `llmgw plan` plans (planner/load.py): whole repositories pinned to the commit `catalog
    validate` recorded, else a state apply made looks like a changed definition everywhere.
    The views show the catalog as written."""
    site, nodes = data.site, data.inventory.nodes
    pinned, unpinned = pin_catalog(data.catalog, site)
    return PlanInputs(catalog=pinned, nodes=nodes, facts={h: f for h, f in data.facts.items() if h in nodes},
                      state=data.state, fabrics=_host_map(data), ports=site.config.ports,
                      weight_sizes=weight_sizes(site.facts_dir), weight_files=weight_files(site.facts_dir),
                      unservable={**unservable_sources(site), **unpinned}, now=site_clock(site, data.loaded_at),
                      unreachable_after=site.config.unreachable_after, lost_after=site.config.lost_after)


def view_plan(data: SiteData, inputs: PlanInputs | None = None) -> tuple[Plan, tuple[str, ...]]:
    """The plan a view shows, and why it is not the one `llmgw plan` would make, if it is not
    (`inputs`: `plan_inputs(data)`, when the caller made them already)."""
    inputs = inputs or plan_inputs(data)
    with collector.paused():
        try:
            return make_plan(inputs), ()
        except PlanError as exc:
            # The planner refuses an empty state while hosts run llmgw units (#14): right for
            # `plan`, which would destroy them, but a view destroys nothing and must still show
            # the fleet. Planned again without the units, it still says what cannot be placed.
            facts = {h: f.model_copy(update={"units": None}) for h, f in inputs.facts.items()}
            note = f"{exc.message} (`llmgw plan` refuses the same; {exc.hint})" if exc.hint else exc.message
            return make_plan(replace(inputs, facts=facts)), (note,)


def held_by_plan(inputs: PlanInputs) -> Held:
    """Whose weights are where, by the planner's own rule (its Fleet's `holders`: llmgw's cache
    entry, or an operator's copy served in place): what views.held shows."""
    fleet = Fleet(inputs.nodes, inputs.facts, inputs.fabrics, inputs.ports, inputs.weight_sizes, inputs.weight_files)
    nodes_of: dict[str, list[str]] = {}
    at: dict[str, dict[str, list[str]]] = {}
    for m in inputs.catalog:
        name = cache_name(m.source)
        for n in fleet.holders(m.source, name):
            path = fleet.copy_at(n, m.source, name) or next(
                w.path for w in (n.facts.weights if n.facts else None) or [] if w.cache_name == name)
            nodes_of.setdefault(m.name, []).append(n.name)
            at.setdefault(n.name, {}).setdefault(path, []).append(m.name)
    return Held(nodes_of, at)


def planned_placement(data: SiteData) -> Placement:
    inputs = plan_inputs(data)  # once, for the plan and for whose weights are where
    plan, notes = view_plan(data, inputs)
    held, sources = held_by_plan(inputs), read_sources(data.site.facts_dir)
    pins = {m.name: Pin(commit=info.commit, size_bytes=info.size_bytes)
            for m in data.catalog if (info := sources.get(model_spec(m))) is not None}
    return Placement(notes=notes,
                     unplaced=tuple(Unplaced.model_validate(u.model_dump(mode="json")) for u in plan.unplaced),
                     moving=tuple(sorted(a.replaces for a in plan.actions
                                         if a.action == "replace" and a.code == "node_draining" and a.replaces)),
                     destroyed_at_deadline=tuple(sorted(a.replica for a in plan.actions
                                                        if a.code == "drain_deadline" and a.replica)),
                     weights_nodes={m: tuple(ns) for m, ns in held.nodes_of.items()},
                     weights_at={n: {path: tuple(ms) for path, ms in at.items()} for n, at in held.at.items()},
                     pins=pins, cache_names=dict(cache_names(data)))


def cache_names(data: SiteData) -> dict[str, str]:
    """Each catalog model's weights cache entry, by the one naming rule (llmgw.weights.names)."""
    return {m.name: cache_name(m.source) for m in data.catalog}


def _host_map(data: SiteData) -> HostFabricMap:
    """The planner's fabric map of a SiteData this module loaded (BASTION's map is one)."""
    if not isinstance(data.fabric_map, HostFabricMap):
        raise TypeError("a site loaded for a router's dashboard (views.sitedata.COPY) cannot be planned: "
                        "load it with llmgw.views.planned.load_site_data")
    return data.fabric_map


def _parsed_map(site: Site, facts: Mapping[str, HostFacts]) -> tuple[FabricMap, tuple[str, ...]]:
    try:
        return placement_fabrics(facts, site.facts_dir.resolve()), ()  # memoised by the captures' digests
    except FabricError as exc:
        return HostFabricMap({}, {}, {}), (f"fabrics unknown: {exc.message}",)


def _parsed_fabrics(data: SiteData) -> FabricViews:
    """Every fabric whole, its texts parsed for `fabric_map` already; none when they did not."""
    if not data.fabric_map.glances:
        return LiveFabrics(FabricIndex({}))
    return LiveFabrics(memo_fabric_index(data.facts, data.site.facts_dir.resolve()))


BASTION = Loaders(fabric_map=_parsed_map, fabrics=_parsed_fabrics, placement=planned_placement,
                  held=lambda data: held_by_plan(plan_inputs(data)), cache_names=cache_names)


def load_site_data(site: Site, *, now: datetime | None = None) -> SiteData:
    """Read the catalog, inventory, facts, fabrics and state; the plan is made when a view first asks."""
    return _load(site, now=now, loaders=BASTION)


def planned_downloads(plan: Plan) -> dict[tuple[str, str], list[str]]:
    """(host, cache entry) -> the replicas of `plan` that download it there (for apply's
    download feed, llmgw.views.live_downloads)."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for r in plan.desired.replicas:
        if r.cache_name:
            for s in r.shards:
                wanted.setdefault((s.node, r.cache_name), []).append(r.id)
    return wanted


def weights_holders(data: SiteData) -> dict[str, dict[str, set[str]]]:
    """fabric -> model -> the nodes holding its weights (the placement's, views.held), for the
    fleet gauges."""
    out: dict[str, dict[str, set[str]]] = {}
    for model, nodes in data.placement.weights_nodes.items():
        for node in nodes:
            for fid in data.fabric_map.fabrics_of(node):
                out.setdefault(fid, {}).setdefault(model, set()).add(node)
    return out


def site_copy_files(site: Site) -> dict[str, bytes]:
    """What apply plans here for the routers' site copy, by file name: what cannot be placed
    (PLACEMENT_FILE), the fleet in numbers (FLEET_FILE) and the fabrics as the dashboard shows
    them (llmgw.views.fabrics.fabric_copy_files). A site apply cannot plan for the dashboard
    (apply itself planned already) ships the reason in the placement and no fleet summary: the
    dashboard says it, the gauges are absent, and apply goes on; fabrics that cannot be mapped
    are shipped as a note saying why."""
    fabrics: dict[str, bytes] = {}
    try:
        data = load_site_data(site)
        placement = data.placement
        fleet: bytes | None = summarise(data, weights_holders(data)).to_json().encode()
    except LlmgwError as exc:
        placement, fleet = unknown_placement(f"apply could not plan what cannot be placed: {exc.message}"), None
    else:
        try:
            fabrics = fabric_copy_files(data)
        except LlmgwError as exc:
            fabrics = {FABRICS_FILE: FabricsCopy(notes=(f"fabrics unknown: {exc.message}",)).to_json().encode()}
    out = {**fabrics, PLACEMENT_FILE: placement.to_json().encode()}
    if fleet is not None:
        out[FLEET_FILE] = fleet
    return out


def placement_json(site: Site) -> bytes:
    """What the routers' dashboards show as unplaceable, planned here for apply to ship."""
    return site_copy_files(site)[PLACEMENT_FILE]
