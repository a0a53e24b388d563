"""Wiring a site to apply: its inventory, state file and engine artifacts."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.apply.dashboard_site import DashboardSite
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.apply.executor import Applier, Say
from llmgw.apply.hosts import Hosts, Progress
from llmgw.apply.wheelhouse import wheelhouse
from llmgw.engines import Device
from llmgw.errors import LlmgwError
from llmgw.facts import HostFacts
from llmgw.facts.cache import read_facts
from llmgw.inventory import Inventory, load_inventory
from llmgw.planner import FabricIndex, Plan, PlannedShard
from llmgw.planner.load import fabric_index
from llmgw.site import Site
from llmgw.state import StateBackend, WriteMeta
from llmgw.state.select import backend_for, is_state_url
from llmgw.views.planned import site_copy_files
from llmgw.weights.check import weights_host_vars
from llmgw.weights.shared import shared_cache_key


def hosts_for(site: Site, forks: int = 20, engines_playbook: str = "apply.yml") -> Hosts:
    artifacts = site.path(site.config.engine_artifacts) if site.config.engine_artifacts else None
    dashboard = {"llmgw_router_site_prometheus": site.config.prometheus or "",
                 # what routers may follow (llmgw_router_state_follow); none for a file state
                 "llmgw_router_state_url": site.config.state if is_state_url(site.config.state) else ""}
    inventory = load_inventory(site.inventory)
    return Hosts(site.inventory, inventory, artifacts=artifacts, forks=forks,
                 engines_playbook=engines_playbook, dashboard=dashboard,
                 dashboard_site=DashboardSite(site.catalog_dir, site.facts_dir, site.inventory,
                                              planned=lambda: site_copy_files(site)),
                 extra=weights_host_vars(site),
                 shared_cache=shared_caches(site, inventory), engine_keys=EngineKeyring.beside(site.state_file))


def shared_caches(site: Site, inventory: Inventory) -> Callable[[str], str | None]:
    """node -> the key of its shared weights cache (facts or llmgw_shared_dirs), else None;
    the facts are read on first use."""
    facts: list[dict[str, HostFacts]] = []

    def key(node: str) -> str | None:
        host = inventory.nodes.get(node)
        if host is None:
            return None
        if not facts:
            try:
                facts.append(read_facts(site.facts_dir))
            except LlmgwError:
                facts.append({})
        return shared_cache_key(host, facts[0].get(node))

    return key


def fabric_hcas(site: Site) -> Callable[[str, str], list[str]]:
    """(node, fabric) -> the node's InfiniBand adapters on that fabric, as NCCL_IB_HCA names
    (`mlx5_0`, or `mlx5_0:2` for a second port); read from the facts cache on first use."""
    index: list[FabricIndex] = []

    def lookup(node: str, fabric: str) -> list[str]:
        try:
            if not index:
                index.append(fabric_index(read_facts(site.facts_dir).values()))
            return [rail.replace("/", ":") for rail in index[0].leaves_of(node, fabric)]
        except LlmgwError:
            return []  # NCCL then picks adapters itself

    return lookup


def gpu_device(site: Site) -> Callable[[PlannedShard], Device | None]:
    """A shard -> its first GPU's name and memory from the facts cache, read on first use;
    None where the facts do not say (or the shard has no GPU)."""
    devices: list[dict[tuple[str, int], Device]] = []

    def lookup(shard: PlannedShard) -> Device | None:
        if not devices:
            try:
                found = read_facts(site.facts_dir)
            except LlmgwError:
                found = {}
            devices.append({(host, g.index): Device(g.name, g.memory_total_mb)
                            for host, f in found.items() for g in f.gpus or []})
        return devices[0].get((shard.node, shard.gpus[0])) if shard.gpus else None

    return lookup


def applier_for(site: Site, plan: Plan, *, grace: float = 120.0, forks: int = 20,
                progress: Progress | None = None, say: Say | None = None,
                engines_playbook: str = "apply.yml", backend: StateBackend | None = None,
                meta: WriteMeta | None = None, routers_installed: bool = False) -> Applier:
    """An Applier for the site; `backend` (default: the site's, llmgw.state.select.backend_for) keeps the state;
    `routers_installed`: deliver the state alone to the routers (Applier)."""
    from llmgw.probe import replica_verifier

    hosts = hosts_for(site, forks, engines_playbook)
    return Applier(plan=plan, state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
                   wheelhouse=wheelhouse, grace=grace, progress=progress, say=say, fabric_hcas=fabric_hcas(site),
                   backend=backend or backend_for(site), meta=meta,
                   verify=replica_verifier(site, hosts.engine_keys.key if hosts.engine_keys else None, say),
                   routers_installed=routers_installed, gpu_device=gpu_device(site))
