"""`llmgw controller`: pull-style GitOps, the long-running form of plan + apply.

    loop.py   the controller: leadership, follow a branch, plan, policy, apply
    runs.py   the run history, kept beside the state (PostgreSQL or a file)
    api.py    the admin API: status, runs, approval
"""

from llmgw.controller.loop import POLICIES, Controller
from llmgw.controller.runs import Run, RunStore, runs_for

__all__ = ["POLICIES", "Controller", "Run", "RunStore", "runs_for"]
