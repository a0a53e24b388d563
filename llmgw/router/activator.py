"""The real Activator: on-demand replicas started and stopped by apply's own machinery.

`llmgw -C SITE router serve --activator llmgw.router.activator:factory` gives the
router a way to start a min-0 model on its first request: the activator plans one
replica more (llmgw.apply.on_demand_plans), carries it out with the Applier (weights, units,
health, `ready` recorded and delivered to every router), and stops an idle one the
same way (drained first). It needs what apply needs: the site (catalog, inventory,
facts) and the state file the router serves, so it runs beside the site, on the
control host or a bastion; routers elsewhere get the state delivered as usual.

Ansible runs in a worker thread; the exclusive state lock makes an activation and an
operator's apply take turns (whichever comes second is refused, and the router
answers 503 with that reason, to be retried).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from llmgw.apply.on_demand_plans import activation_plan, deactivation_plan
from llmgw.apply.wiring import applier_for
from llmgw.errors import SiteError
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import WriteMeta, backend_for

log = logging.getLogger("llmgw.router.activator")


class ApplyActivator:
    """Starts a replica of an on-demand model, or stops an idle one, through the Applier."""

    def __init__(self, site: Site, *, grace: float = 30.0) -> None:
        self.site = site
        self.grace = grace
        self._lock = asyncio.Lock()  # one Ansible run at a time from this router

    def _say(self, line: str) -> None:
        log.info("%s", line)

    def _activate(self, model: str) -> None:
        # The site's state lock (a file's flock, or PostgreSQL's lease): activations and
        # operators' applies take turns, whichever backend holds the state.
        with backend_for(self.site) as backend, backend.lock("activate"):
            plan = activation_plan(load_inputs(self.site), model)
            if plan is None:
                return
            applier_for(self.site, plan, grace=self.grace, say=self._say, engines_playbook="activate.yml",
                        backend=backend, meta=WriteMeta("activate")).run()

    def _deactivate(self, replica_id: str) -> None:
        with backend_for(self.site) as backend, backend.lock("deactivate"):
            plan = deactivation_plan(backend.read(), replica_id)
            if plan is None:
                return
            applier_for(self.site, plan, grace=self.grace, say=self._say, engines_playbook="activate.yml",
                        backend=backend, meta=WriteMeta("deactivate")).run()

    async def activate(self, model: str) -> None:
        async with self._lock:
            await asyncio.to_thread(self._activate, model)

    async def deactivate(self, replica_id: str) -> None:
        async with self._lock:
            await asyncio.to_thread(self._deactivate, replica_id)


def factory(*, state_path: Path, site: Any) -> ApplyActivator:
    """For `--activator llmgw.router.activator:factory`: the router must serve the site's own state."""
    if not isinstance(site, Site):
        raise SiteError("the on-demand activator needs a site: run `llmgw -C SITE router serve ...`")
    if state_path.resolve() != site.state_file.resolve():
        raise SiteError(f"the router serves {state_path}, but the site's state is {site.state_file}",
                        hint="drop --state so the router serves the site's state, which the activator writes")
    return ApplyActivator(site)
