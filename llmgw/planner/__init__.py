"""The planner: a pure function from catalog + facts + applied state to a plan.

    inputs.py     PlanInputs (everything a plan is made from) and the FabricIndex protocol
    fleet.py      nodes as placement sees them, and what this plan has taken of each
    placement.py  filters (a sentence per rejection) and preferences
    schema.py     the Plan JSON schema (versioned, reason codes): what apply and scripts read
    reconcile.py  reconcile the state and place replicas: make_plan
    render.py     the plan for people, terraform-style
    explain.py    every candidate per profile for one model
    load.py       reading a site's inputs from disk (the one impure module)

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
