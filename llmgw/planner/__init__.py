"""The planner: a pure function from catalog + facts + applied state to a plan.

    inputs.py     PlanInputs (everything a plan is made from) and the FabricIndex protocol
    fleet.py      nodes as placement sees them, and what this plan has taken of each
    placement.py  filters (a sentence per rejection) and preferences
    schema.py     the Plan JSON schema (versioned, reason codes): what apply and scripts read
    reconcile.py  reconcile the state and place replicas: make_plan
    render.py     the plan for people, terraform-style
    explain.py    every candidate per profile for one model
    load.py       reading a site's inputs from disk (the one impure module)
    spec.py       names and fingerprints the plan hands out: replica ids, unit names, spec hashes
    spreading.py  the best node for one more single-node GPU replica, spread apart, found fast
    topology.py   which GPU indices of a host a shard gets, and the InfiniBand adapters with them
    routes.py     weighted routes in the plan: the record routers read, the split as planned
    trust.py      which replicas widen what the fleet trusts, for the controller's policy `auto`
    markdown.py   the plan as Markdown, for a pull request's review comment

Code outside the planner imports from here, not from the modules above.
"""

from llmgw.planner.inputs import NO_FABRICS, FabricIndex, MapFabrics, PlanInputs
from llmgw.planner.reconcile import make_plan
from llmgw.planner.schema import (
    PLAN_VERSION,
    REASON_CODES,
    Action,
    Desired,
    NotMoved,
    OnDemand,
    Plan,
    PlannedReplica,
    PlannedShard,
    ReasonCode,
    Rejection,
    Summary,
    UnitRef,
    Unplaced,
    load_plan,
    loaded_adapters,
    replica_sort_key,
)

__all__ = [
    "NO_FABRICS",
    "PLAN_VERSION",
    "REASON_CODES",
    "Action",
    "Desired",
    "FabricIndex",
    "MapFabrics",
    "NotMoved",
    "OnDemand",
    "Plan",
    "PlanInputs",
    "PlannedReplica",
    "PlannedShard",
    "ReasonCode",
    "Rejection",
    "Summary",
    "UnitRef",
    "Unplaced",
    "load_plan",
    "loaded_adapters",
    "make_plan",
    "replica_sort_key",
]
