"""Gather a site's plan inputs from disk: catalog, inventory, facts cache, fabrics, state, sizes.

This is the planner's only impure part; everything after it is a function of what it returns.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from llmgw import collector
from llmgw.catalog import load_catalog
from llmgw.catalog.load import catalog_files
from llmgw.errors import PlanError, StateError
from llmgw.fabric import FabricIndex as RealFabricIndex
from llmgw.fabric import fabrics_from_facts
from llmgw.fabric.hostmap import HostFabricMap, capture_key
from llmgw.facts import HostFacts, memo
from llmgw.facts.cache import MEMO_MIN_FILES, read_facts
from llmgw.inventory import Host, load_inventory
from llmgw.planner.inputs import FabricIndex, PlanInputs
from llmgw.planner.reconcile import make_plan
from llmgw.planner.schema import Plan
from llmgw.planner.spec import endpoint_url
from llmgw.site import SITE_FILE, Site, site_clock
from llmgw.state import State
from llmgw.state.select import backend_for
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


def adapter_ranks(facts_dir: Path) -> dict[str, int]:
    """Adapter source -> its LoRA rank, where `catalog validate` read one from its adapter_config.json
    (under the pinned source too, as the planner sees whole repositories pinned)."""
    ranks: dict[str, int] = {}
    for src, info in read_sources(facts_dir).items():
        if info.adapter_rank:
            ranks[src] = info.adapter_rank
            if info.pinned:
                ranks[info.pinned] = info.adapter_rank
    return ranks


def weight_files(facts_dir: Path) -> dict[str, dict[str, int | None]]:
    """Pinned whole repository -> its selected files and sizes, where `catalog validate` recorded them."""
    return {info.pinned: info.file_sizes for info in read_sources(facts_dir).values()
            if info.pinned and info.file_sizes}


def _read_state(site: Site, nodes: Mapping[str, Host]) -> State:
    """The newest state from the site's backend (a file, or PostgreSQL), its endpoints checked
    against the inventory."""
    with backend_for(site) as backend:
        state = backend.read()
        check_endpoints(state, nodes, backend.where)
    return state


def check_endpoints(state: State, nodes: Mapping[str, Host], where: str) -> None:
    """Refuse a state whose replica is reached anywhere but at its rank-0 node's address.

    The state's schema checks that each endpoint is formed as llmgw forms it, with the rank-0
    shard's port (llmgw.state.model); only the inventory knows the node's address. Routers send
    a replica its engine key and its traffic at this endpoint: an edited one sends both away."""
    for i, r in enumerate(state.replicas):
        first = next(s for s in r.shards if s.rank == 0)
        host = nodes.get(first.node)
        if host is not None and r.endpoint != endpoint_url(host.mgmt_address, first.port):
            raise StateError(
                f"{where}: replicas[{i}].endpoint: replica {r.id} is recorded at {r.endpoint}, but its rank-0 "
                f"shard runs on {first.node}, whose address is {host.mgmt_address} (llmgw_mgmt_address, "
                "else ansible_host, in the inventory)",
                hint="the state was edited, or the node's address changed under running replicas: restore the "
                     f"state from its history or a backup; or set {first.node}'s address back, drain the node "
                     "(`llmgw drain`), apply, and only then change it", host=first.node)


def inputs_digest(site: Site, state: State) -> str:
    """SHA-256 of what `llmgw plan` reads: every file of the catalog, the inventory and the facts
    cache (by path relative to the site, and content), llmgw.yaml, and the state's lineage and serial.

    A saved plan records it (Plan.inputs_digest) so that `apply PLAN`, which makes the plan
    again, can tell a plan whose inputs moved on from one edited after it was saved."""
    h = hashlib.sha256()
    h.update(json.dumps({"lineage": state.lineage, "serial": state.serial}, sort_keys=True).encode())
    root = str(site.root)
    for files in ([str(site.root / SITE_FILE)], [str(p) for p in catalog_files(site.catalog_dir)],
                  _files(str(site.inventory), ""), _files(str(site.facts_dir), ".json")):
        for f in files:
            try:
                with open(f, "rb") as fh:
                    data = fh.read()
            except OSError:  # gone (or unreadable) now: loading it failed already, or it is not an input
                continue
            name = (os.path.relpath(f, root) if f.startswith(root + os.sep) else f).encode()
            h.update(b"%d:%s\0%d:" % (len(name), name, len(data)))
            h.update(data)
    return h.hexdigest()


def _files(path: str, suffix: str) -> list[str]:
    """`path` itself, or the files under it whose names end in `suffix` (no hidden ones), in
    order. os.walk, not Path.rglob: a 4,096-host facts cache took pathlib half a second."""
    if not os.path.isdir(path):
        return [path]
    found: list[str] = []
    for top, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(os.path.join(top, n) for n in names if n.endswith(suffix) and not n.startswith("."))
    return sorted(found)


def site_plan(site: Site, *, memo_min: int = MEMO_MIN_FILES) -> tuple[PlanInputs, Plan]:
    """A site's current plan inputs and the plan they give, stamped with the inputs' digest:
    what `llmgw plan` saves and `llmgw apply` makes (again, for a saved plan)."""
    inputs = load_inputs(site, memo_min=memo_min)
    plan = make_plan(inputs)
    return inputs, plan.model_copy(update={"inputs_digest": inputs_digest(site, inputs.state)})


def check_replanned(saved: Plan, fresh: Plan, where: str) -> None:
    """Refuse a saved plan that is not, byte for byte, the plan its site's inputs give now.

    Inputs that changed without changing the plan (facts gathered again) leave it applicable:
    what is applied is exactly what the inputs give now. The digest only tells the two
    refusals apart."""
    same_inputs = saved.model_copy(update={"inputs_digest": fresh.inputs_digest})
    if same_inputs.to_json() == fresh.to_json():
        return
    at, was, now = _first_difference(same_inputs.model_dump(mode="json"), fresh.model_dump(mode="json"), "")
    differs = f"at {at or 'the top'} the saved plan has {_short(was)} where planning now gives {_short(now)}"
    if saved.inputs_digest != fresh.inputs_digest:
        raise PlanError(f"{where} was made from other inputs than the site holds now (its catalog, inventory, "
                        f"facts or state changed since): {differs}",
                        hint="make a new plan with `llmgw plan --out FILE`, review it, and apply that")
    raise PlanError(f"{where} is not the plan its inputs give: {differs}; it was edited after `llmgw plan` "
                    "saved it (or made by another llmgw), or time alone changed it: a drain deadline passed, or "
                    "a node became unreachable or lost, since",
                    hint="do not apply it: make the plan again with `llmgw plan --out FILE` and review that")


def _first_difference(a: object, b: object, path: str) -> tuple[str, object, object]:
    """The first field path where two JSON values differ, and both values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if a.get(k, _ABSENT) != b.get(k, _ABSENT):
                return _first_difference(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{path}.{k}" if path else k)
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
    return path, a, b


_ABSENT = "(absent)"


def _short(value: object) -> str:
    text = json.dumps(value) if value != _ABSENT else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


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
        state=_read_state(site, nodes), fabrics=placement_fabrics(facts, site.facts_dir.resolve(), memo_min=memo_min),
        ports=site.config.ports,
        weight_sizes=weight_sizes(site.facts_dir), weight_files=weight_files(site.facts_dir),
        adapter_ranks=adapter_ranks(site.facts_dir), unservable={**unservable_sources(site), **unpinned},
        now=site_clock(site), unreachable_after=site.config.unreachable_after, lost_after=site.config.lost_after)
