"""`llmgw apply`: carry out a plan on the hosts, rolling and resumable.

    executor.py    the steps, in order, with the state written after every one
    hosts.py       the playbooks apply runs (weights, shards, routers, drains) via llmgw.runner
    wheelhouse.py  the router's offline installation medium, built on the control host
    site.py        wiring a site (inventory, state file, engine artifacts) to the two above
"""

from llmgw.apply.executor import Applier, Outcome, check_fresh
from llmgw.apply.wiring import applier_for, hosts_for

__all__ = ["Applier", "Outcome", "applier_for", "check_fresh", "hosts_for"]
