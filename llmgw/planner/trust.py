"""Which replicas of a plan widen what the fleet trusts, for the controller's policy `auto`.

A profile's `trust_remote_code: true` makes its engine run Python from the model's
repository: a change anyone who may edit the catalog can propose, so an automatic run
that brings it in waits for an operator's approval. A replica widens trust when it is new,
runs remote code, and no replica the state records was made from the same definition
(model and spec hash: the hash covers `trust_remote_code`), so scaling up a definition
already applied asks nothing, and turning the key on for a running model asks once.
A model scaled to zero leaves no replica in the state, so its next start asks again.
"""

from __future__ import annotations

from llmgw.planner.schema import Plan
from llmgw.state import State


def widens_trust(plan: Plan, state: State) -> list[str]:
    """The ids of the plan's new replicas that run remote code no applied replica ran."""
    applied = {(r.model, r.spec_hash) for r in state.replicas if r.spec_hash}
    return sorted(r.id for r in plan.desired.replicas
                  if r.status == "new" and r.trust_remote_code and (r.model, r.spec_hash) not in applied)
