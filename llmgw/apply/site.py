"""Wiring a site to apply: its inventory, state file and engine artifacts."""

from __future__ import annotations

from llmgw.apply.executor import Applier, Say
from llmgw.apply.hosts import Hosts, Progress
from llmgw.apply.wheelhouse import wheelhouse
from llmgw.inventory import load_inventory
from llmgw.planner.plan import Plan
from llmgw.site import Site


def hosts_for(site: Site, forks: int = 20, engines_playbook: str = "apply.yml") -> Hosts:
    artifacts = site.path(site.config.engine_artifacts) if site.config.engine_artifacts else None
    return Hosts(site.inventory, load_inventory(site.inventory), artifacts=artifacts, forks=forks,
                 engines_playbook=engines_playbook)


def applier_for(site: Site, plan: Plan, *, grace: float = 120.0, forks: int = 20,
                progress: Progress | None = None, say: Say | None = None,
                engines_playbook: str = "apply.yml") -> Applier:
    hosts = hosts_for(site, forks, engines_playbook)
    return Applier(plan=plan, state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
                   wheelhouse=wheelhouse, grace=grace, progress=progress, say=say)
