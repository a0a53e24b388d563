"""Operator views: the data behind `llmgw status/models/replicas` AND the dashboard.

Both the CLI and the dashboard call these functions and render the plain JSON-ready
dicts they return, so a terminal and a browser can never disagree about the fleet.

    sitedata.py  everything a view reads from a site, loaded once (and cached by mtimes)
    placement.py what the plan cannot place, as data: shipped to a router's dashboard by apply
    planned.py   the bastion's way to load a site: placement planned by the planner itself.
                 Not offered here: the router imports this package, never the planner (#34)
    results.py   stored bench and check results as `llmgw models MODEL` and the dashboard show them
    runtime.py   what the routers' admin API adds: in-flight counts, last use, errors
    status.py    the aggregates: capacity per GPU class, free whole nodes per fabric, counts
    models.py    per model: who serves it, replicas ready/min, a status word; placement failures
    replicas.py  per replica: shards, state, age, idle, endpoint, errors, downloads
    nodes.py     per node, and one node in full
    fabric_copy.py what the dashboard shows of the fabrics, as data a router reads from its site copy
    fabrics.py   the same answered live on the bastion, one fabric laid out for drawing, and the
                 files apply ships them in. Not for the router: it imports llmgw.fabric (#34)
    text.py      durations, sizes and bars, shared by terminal and browser
    defaults.py  DEFAULT_ADMIN, IDLE_AFTER (imports nothing)
    fleet.py     the fleet in numbers for the routers' /metrics, summarised at apply; the file
                 it ships and its reader are llmgw.fleetfile (the router reads it, no view)
    held.py      whose weights are where: per model the nodes holding them, per node what it holds
    versions.py  the host stack of a node in one short text, and the fleet's versions counted
    demand.py    per model, the controller's last scale decision and activations (`llmgw models`)
    download_board.py  apply's weights downloads as a router's dashboard keeps them
    The bastion's only (the router never imports them, #34):
    downloads.py the weights module's progress files, read through Ansible
    live_downloads.py  apply's downloads live on the dashboard: bytes, rate and ETA per host
    logs.py      `llmgw logs`: each shard's journal, read on its node through Ansible
    ask_routers.py  every router's admin API at once, directly or through an SSH tunnel
    tunnel.py    an SSH tunnel to a router's admin API, opened and closed per call

The names below load on first use (PEP 562), so `from llmgw.views.defaults import ...`
or `import llmgw.views` costs nothing until a view runs: the CLI's --help stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmgw.views.defaults import DEFAULT_ADMIN, IDLE_AFTER

if TYPE_CHECKING:
    from llmgw.views.runtime import Runtime
    from llmgw.views.sitedata import SiteData, SiteDataCache

__all__ = ["DEFAULT_ADMIN", "IDLE_AFTER", "Runtime", "SiteData", "SiteDataCache"]

_LAZY = {"Runtime": "llmgw.views.runtime", "SiteData": "llmgw.views.sitedata",
         "SiteDataCache": "llmgw.views.sitedata"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmgw.views' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
