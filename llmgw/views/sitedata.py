"""Everything a view reads from a site, loaded in one go.

The views never touch a file themselves: they are functions of a `SiteData` (and of the
routers' `Runtime`), so tests build one from the example site and get exact numbers.
The plan is made here too, with the planner itself: "cannot be placed" in a view is what
`llmgw plan` would say, not a second opinion. It is made when a view first asks for it:
`llmgw nodes` and most dashboard pages never do (a third of a second at 4,096 hosts).

The dashboard asks for the site on every page; `SiteDataCache` reloads it only when a
file under the site changed (the inventory goes through `ansible-inventory`, which takes
seconds).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from llmgw import collector
from llmgw.catalog import Catalog, load_catalog
from llmgw.errors import FabricError, PlanError
from llmgw.fabric import FabricIndex
from llmgw.fabric.hostmap import HostFabricMap
from llmgw.facts.cache import read_facts
from llmgw.facts.records import HostFacts
from llmgw.inventory import Inventory, load_inventory
from llmgw.planner import Plan, PlanInputs, make_plan
from llmgw.planner.load import memo_fabric_index, placement_fabrics, plan_clock, weight_files, weight_sizes
from llmgw.site import SITE_FILE, Site
from llmgw.state import State, read_state
from llmgw.weights.check import pin_catalog, unservable_sources


@dataclass(frozen=True)
class SiteData:
    site: Site
    catalog: Catalog
    inventory: Inventory
    facts: dict[str, HostFacts]  # every facts file, inventory node or not
    state: State
    fabric_map: HostFabricMap  # what the plan and the glance views ask of the fabrics
    inputs: PlanInputs  # what `plan` is made from (its `facts`: the inventory nodes' only)
    loaded_at: datetime
    notes: tuple[str, ...] = field(default=())  # what loading found; `plan_notes` has the plan's

    @cached_property
    def _planned(self) -> tuple[Plan, tuple[str, ...]]:
        with collector.paused():  # as load_site_data: the dashboard asks outside any command's pause
            try:
                return make_plan(self.inputs), ()
            except PlanError as exc:
                # The planner refuses an empty state while hosts run llmgw units (#14): right for
                # `plan`, which would destroy them, but a view destroys nothing and must still show
                # the fleet. Planned again without the units, it still says what cannot be placed.
                facts = {h: f.model_copy(update={"units": None}) for h, f in self.inputs.facts.items()}
                note = f"{exc.message} (`llmgw plan` refuses the same; {exc.hint})" if exc.hint else exc.message
                return make_plan(replace(self.inputs, facts=facts)), (note,)

    @property
    def plan(self) -> Plan:
        return self._planned[0]

    @property
    def plan_notes(self) -> tuple[str, ...]:
        """Why the plan a view shows is not the one `llmgw plan` would make, if it is not."""
        return self._planned[1]

    @cached_property
    def fabrics(self) -> FabricIndex:
        """Every fabric whole (switches, cables, adapters), loaded when first asked: the fabric
        pages and a node's detail (its adapters) need it, the lists and the glance do not (at
        4,096 hosts it is 19 MB of memo, half a second to load). Its texts parsed for
        `fabric_map` already; an empty index when they did not."""
        if not self.fabric_map.glances:
            return FabricIndex({})
        with collector.paused():  # the dashboard asks outside any command's pause
            return memo_fabric_index(self.facts, self.site.facts_dir.resolve())


def load_site_data(site: Site, *, now: datetime | None = None) -> SiteData:
    """Read the catalog, inventory, facts, fabrics and state, and make the plan."""
    # A fleet's facts and fabric index are hundreds of thousands of objects the cyclic
    # collector would walk again and again as they load (llmgw.collector).
    with collector.paused():
        return _load_site_data(site, now=now)


def _load_site_data(site: Site, *, now: datetime | None) -> SiteData:
    notes: list[str] = []
    if site.catalog_dir.is_dir():
        catalog = load_catalog(site.catalog_dir, root=site.root)
    else:
        # The fleet can be looked at before any model is written down.
        catalog = Catalog([])
        notes.append(f"no catalog at {site.catalog_dir}: no models to place")
    if site.inventory.exists():
        inventory = load_inventory(site.inventory)
    else:
        inventory = Inventory(path=site.inventory, hosts={})
        notes.append(f"no inventory at {site.inventory}: there are no nodes to place replicas on")
    facts = read_facts(site.facts_dir)
    state = read_state(site.state_file)
    try:
        fabric_map = placement_fabrics(facts, site.facts_dir.resolve())  # parsed once per change
    except FabricError as exc:
        fabric_map = HostFabricMap({}, {}, {})
        notes.append(f"fabrics unknown: {exc.message}")
    nodes = inventory.nodes
    node_facts = {h: f for h, f in facts.items() if h in nodes}
    # Planned as `llmgw plan` plans (planner/load.py): whole repositories pinned to the commit
    # `catalog validate` recorded, else a state apply made looks like a changed definition
    # everywhere. The views show the catalog as written.
    pinned, unpinned = pin_catalog(catalog, site)
    now = now or datetime.now(UTC)
    inputs = PlanInputs(catalog=pinned, nodes=nodes, facts=node_facts,
                        state=state, fabrics=fabric_map, ports=site.config.ports,
                        weight_sizes=weight_sizes(site.facts_dir), weight_files=weight_files(site.facts_dir),
                        unservable={**unservable_sources(site), **unpinned},
                        now=plan_clock(site, now), unreachable_after=site.config.unreachable_after,
                        lost_after=site.config.lost_after)
    if state.serial == 0 and not state.replicas:
        notes.append(f"the state is empty (serial 0, {site.state_file}): nothing applied from this "
                     "checkout, or `state:` in llmgw.yaml does not point at the site's state")
    return SiteData(site=site, catalog=catalog, inventory=inventory, facts=facts, state=state,
                    fabric_map=fabric_map, inputs=inputs, loaded_at=now, notes=tuple(notes))


def _fingerprint(site: Site) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of every file a SiteData is made from: a change to any reloads.

    Asked on every dashboard request, so walked with os.scandir, one stat a file: pathlib's
    rglob, is_file and stat took 45-150 ms for 4,096 facts files."""
    out: list[tuple[str, int, int]] = []
    for root in (site.root / SITE_FILE, site.catalog_dir, site.inventory, site.facts_dir, site.state_file):
        for path in sorted(_files(str(root))):
            try:
                st = os.stat(path)
            except OSError:
                continue
            out.append((path, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _files(root: str) -> list[str]:
    """`root` when it is not a folder, else every file under it (links to folders not followed)."""
    if not os.path.isdir(root):
        return [root]
    found: list[str] = []
    folders = [root]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.is_file():
                found.append(entry.path)
    return found


class SiteDataCache:
    """The site's data, reloaded when a file under it changed since the last load."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, int, int], ...] | None = None
        self._data: SiteData | None = None

    def get(self) -> SiteData:
        with self._lock:
            site = Site.load(self.root)
            key = _fingerprint(site)
            if self._data is None or key != self._key:
                self._data = load_site_data(site)
                self._key = key
            return self._data
