"""`llmgw controller`: pull-style GitOps, the long-running form of plan + apply.

    loop.py      the controller: leadership, follow a branch, plan, policy, apply
    checkout.py  its runtime folder, and vetting and checking out a commit it does not trust
    runs.py      the run history, beside the state (PostgreSQL, or a file in the runtime folder),
                 each run bound to its commit and plan digest and sealed
    api.py       the admin API: status, runs, approval
    operators.py who may approve: the operators, each named by a token only they can read
    demand.py    what the routers report, and what the controller decides from it (pure)
    reports.py   routers' load reports as received: parsed as hostile input, kept per router
    scaler.py    the demand loop: reports and activation requests in, scale runs out
    refresh.py   facts refreshed for nodes whose replicas fail, so a dead node is noticed unasked
    metrics.py   its Prometheus metrics: what the demand loop did (docs/demand.md)
    views.py     its demand decisions for `llmgw models`, from the run history
"""

from typing import TYPE_CHECKING, Any

from llmgw.controller.runs import Run, RunStore, runs_for

if TYPE_CHECKING:
    from llmgw.controller.loop import POLICIES, Controller


def __getattr__(name: str) -> Any:
    # The loop (Ansible's runner, the apply package, prometheus_client: 0.09 s of imports) is
    # loaded when first asked for: `llmgw status` and `llmgw models` read only the run history.
    if name in ("POLICIES", "Controller"):
        from llmgw.controller import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["POLICIES", "Controller", "Run", "RunStore", "runs_for"]
