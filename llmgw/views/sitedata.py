"""Everything a view reads from a site, loaded in one go.

The views never touch a file themselves: they are functions of a `SiteData` (and of the
routers' `Runtime`), so tests build one from the example site and get exact numbers.

What cannot be placed is the planner's to say, and the fabrics are the ibnetdiscover
parser's; both run on the bastion only (#34): the router process, whose dashboard renders
these views too, imports neither. So a `SiteData` is loaded with `Loaders`: how its
placement and fabrics are made. This module's own (`COPY`) read what apply shipped into a
router's site copy (`placement.json`, llmgw.views.placement; `fabrics.json` and a page file
per fabric, llmgw.views.fabric_copy); the bastion's (llmgw.views.planned) plan with the
planner itself and parse the fabrics, so "cannot be placed" in `llmgw status` is what
`llmgw plan` would say. The placement and the whole fabrics are made when a view first
asks: `llmgw nodes` and most dashboard pages never do.

The dashboard asks for the site on every page; `SiteDataCache` reloads it only when a
file under the site changed (the inventory goes through `ansible-inventory`, which takes
seconds).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from llmgw import collector
from llmgw.catalog import Catalog, load_catalog
from llmgw.facts import HostFacts
from llmgw.facts.cache import read_facts
from llmgw.inventory import Inventory, load_inventory
from llmgw.site import SITE_FILE, Site, site_clock
from llmgw.state import State, read_state
from llmgw.views.fabric_copy import FABRICS_FILE, CopiedFabrics, FabricMap, FabricsCopy, FabricViews, read_fabrics
from llmgw.views.placement import PLACEMENT_FILE, Held, Placement, read_placement

# (the site, facts of every host) -> what placement and the glance views ask of the fabrics,
# and what loading them found (why they are not known, when they are not)
FabricMapOf = Callable[[Site, Mapping[str, HostFacts]], tuple[FabricMap, tuple[str, ...]]]


@dataclass(frozen=True)
class Loaders:
    """How a SiteData's costly parts are made: the bastion's (planner, memo: views.planned)
    or a router's (its site copy: COPY, below)."""

    fabric_map: FabricMapOf
    fabrics: Callable[[SiteData], FabricViews]  # the fabric pages' and a node detail's answers
    placement: Callable[[SiteData], Placement]
    held: Callable[[SiteData], Held]  # whose weights are where, without a whole plan
    cache_names: Callable[[SiteData], Mapping[str, str]]  # model -> its weights cache entry, without a plan


@dataclass(frozen=True)
class SiteData:
    site: Site
    catalog: Catalog
    inventory: Inventory
    facts: dict[str, HostFacts]  # every facts file, inventory node or not
    state: State
    fabric_map: FabricMap  # what the plan and the glance views ask of the fabrics
    loaded_at: datetime
    loaders: Loaders = field(repr=False, compare=False)
    notes: tuple[str, ...] = field(default=())  # what loading found; `placement.notes` has the plan's
    fabric_notes: tuple[str, ...] = field(default=())  # of `notes`, those on the fabrics

    @property
    def clock(self) -> datetime | None:
        """The time drains and silent nodes are judged at, as the plan judges them
        (llmgw.site.site_clock): when the data was loaded; None on a recorded site."""
        return site_clock(self.site, self.loaded_at)

    @cached_property
    def placement(self) -> Placement:
        """What the plan cannot place, planned here (bastion) or shipped by apply (router)."""
        with collector.paused():  # as load_site_data: the dashboard asks outside any command's pause
            return self.loaders.placement(self)

    @cached_property
    def held(self) -> Held:
        """Whose weights are where (views.held): judged here (bastion) or shipped by apply (router)."""
        with collector.paused():
            return self.loaders.held(self)

    @cached_property
    def cache_names(self) -> Mapping[str, str]:
        """Each catalog model's weights cache entry: named here (bastion) or shipped by apply (router)."""
        return self.loaders.cache_names(self)

    @cached_property
    def fabrics(self) -> FabricViews:
        """Every fabric whole (switches, cables, adapters), made when first asked: the fabric
        pages and a node's detail (its adapters) need it, the lists and the glance do not (at
        4,096 hosts it is 19 MB of memo, half a second to load)."""
        with collector.paused():  # the dashboard asks outside any command's pause
            return self.loaders.fabrics(self)


def _copied_map(site: Site, _facts: Mapping[str, HostFacts]) -> tuple[FabricMap, tuple[str, ...]]:
    copy, why = read_fabrics(site.root)
    return CopiedFabrics(copy, site.root), (*copy.notes, *((why,) if why else ()))


def _copied_fabrics(data: SiteData) -> FabricViews:
    # COPY's map is its CopiedFabrics, which answers the fabric views too, page files read when asked
    if isinstance(data.fabric_map, CopiedFabrics):
        return data.fabric_map
    return CopiedFabrics(FabricsCopy(), data.site.root)


# A router's: the fabrics and the placement the last apply made on the bastion and shipped.
COPY = Loaders(fabric_map=_copied_map, fabrics=_copied_fabrics,
               placement=lambda data: read_placement(data.site.root),
               held=lambda data: data.placement.held(), cache_names=lambda data: data.placement.cache_names)


def load_site_data(site: Site, *, loaders: Loaders, now: datetime | None = None) -> SiteData:
    """Read the catalog, inventory, facts, fabrics and state; the placement is made on first use.
    `loaders` has no default: a bastion's view plans (views.planned.load_site_data), a router's
    reads its copy (COPY), and neither should get the other's by leaving it out."""
    # A fleet's facts and fabric index are hundreds of thousands of objects the cyclic
    # collector would walk again and again as they load (llmgw.collector).
    with collector.paused():
        return _load_site_data(site, now=now, loaders=loaders)


def _load_site_data(site: Site, *, now: datetime | None, loaders: Loaders) -> SiteData:
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
    fabric_map, fabric_notes = loaders.fabric_map(site, facts)  # made once per change
    notes += fabric_notes
    if state.serial == 0 and not state.replicas:
        notes.append(f"the state is empty (serial 0, {site.state_file}): nothing applied from this "
                     "checkout, or `state:` in llmgw.yaml does not point at the site's state")
    return SiteData(site=site, catalog=catalog, inventory=inventory, facts=facts, state=state,
                    fabric_map=fabric_map, loaded_at=now or datetime.now(UTC), loaders=loaders, notes=tuple(notes),
                    fabric_notes=fabric_notes)


def _fingerprint(site: Site) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of every file a SiteData is made from: a change to any reloads.

    Asked on every dashboard request, so walked with os.scandir, one stat a file: pathlib's
    rglob, is_file and stat took 45-150 ms for 4,096 facts files."""
    out: list[tuple[str, int, int]] = []
    for root in (site.root / SITE_FILE, site.catalog_dir, site.inventory, site.facts_dir, site.state_file,
                 site.root / PLACEMENT_FILE, site.root / FABRICS_FILE):
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
    """The site's data, reloaded when a file under it changed since the last load; by default
    loaded as a router's dashboard loads its site copy (COPY)."""

    def __init__(self, root: Path, loaders: Loaders = COPY) -> None:
        self.root = root
        self.loaders = loaders
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, int, int], ...] | None = None
        self._data: SiteData | None = None

    def get(self) -> SiteData:
        with self._lock:
            site = Site.load(self.root)
            key = _fingerprint(site)
            if self._data is None or key != self._key:
                self._data = load_site_data(site, loaders=self.loaders)
                self._key = key
            return self._data
