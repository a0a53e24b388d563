"""`llmgw apply`: carry out a plan on the hosts, rolling and resumable.

    executor.py    the steps, in order, with the state written after every one
    delivery.py    which serial each router was seen to load, kept beside the state
    hosts.py       the playbooks apply runs (weights, shards, routers, drains) via llmgw.runner
    wheelhouse.py  the router's offline installation medium, built on the control host
    wiring.py      wiring a site (inventory, state file, engine artifacts) to the two above
    dashboard_site.py   the routers' dashboard copy of the site, packed into one archive
    engine_keys.py      one API key per replica, derived from a site secret
    controller_token.py the token routers show the controller's demand API
    on_demand_plans.py  plans for demand: replicas more, or one replica less
    admin_token.py      the token routers' admin APIs take for a change (llmgw.router.admin_guard)
"""

from llmgw.apply.delivery import Deliveries, deliveries_for
from llmgw.apply.executor import Applier, Outcome, check_fresh
from llmgw.apply.wiring import applier_for, hosts_for

__all__ = ["Applier", "Deliveries", "Outcome", "applier_for", "check_fresh", "deliveries_for", "hosts_for"]
