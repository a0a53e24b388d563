"""The controller's demand decisions for `llmgw models`, from the run history beside the state."""

from __future__ import annotations

from typing import Any

from llmgw.controller.runs import runs_for
from llmgw.errors import LlmgwError
from llmgw.site import Site
from llmgw.state.select import backend_for
from llmgw.views.demand import demand_view


def site_demand(site: Site) -> dict[str, Any]:
    """Per model the last scale decision and activations in flight; an unreachable state is a note."""
    try:
        with backend_for(site) as backend:
            return {**demand_view(r.as_json() for r in runs_for(backend, create=False).all()), "error": None}
    except LlmgwError as exc:
        return {"models": {}, "activating": [], "error": exc.message}
