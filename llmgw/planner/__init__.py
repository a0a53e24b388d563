"""The planner: a pure function from catalog + facts + applied state to a plan.

    inputs.py     PlanInputs (everything a plan is made from) and the FabricIndex protocol
    fleet.py      nodes as placement sees them, and what this plan has taken of each
    placement.py  filters (a sentence per rejection) and preferences
    plan.py       reconcile the state, place replicas, the Plan JSON schema
    render.py     the plan for people, terraform-style
    explain.py    every candidate per profile for one model
    load.py       reading a site's inputs from disk (the one impure module)
"""

from llmgw.planner.inputs import NO_FABRICS, FabricIndex, MapFabrics, PlanInputs
from llmgw.planner.plan import Plan, make_plan

__all__ = ["NO_FABRICS", "FabricIndex", "MapFabrics", "Plan", "PlanInputs", "make_plan"]
