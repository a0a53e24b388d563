"""Facts refreshed for nodes whose replicas fail, so a dead node is noticed unasked.

Routers say, per replica, whether their health checks find it failing (demand.ReplicaLoad).
A replica that every fresh report naming it calls failing points at its nodes; on its demand
tick (every few seconds, under the tick mutex: never during an apply) the controller gathers
facts of those nodes alone, each at most once per `REFRESH_EVERY`. A host that does not
answer gets `stale_since` as `llmgw facts` would write it, and the plan's liveness
(llmgw.nodetime) turns it unreachable, then lost; when a refresh changes any node's
reachability the controller plans its commit again (loop.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from llmgw.controller.demand import Report
from llmgw.errors import LlmgwError
from llmgw.facts.cache import read_facts
from llmgw.facts.gather import GatherReport, gather
from llmgw.site import Site
from llmgw.state import State

# Seconds between two refreshes of one node's facts (a gathering of an unreachable host
# takes its SSH timeout; a failing replica is reported every few seconds).
REFRESH_EVERY = 60.0

Gather = Callable[..., GatherReport]  # llmgw.facts.gather.gather's signature (site, *, limit=...)


def failing_replicas(reports: Iterable[Report], routers: Iterable[str]) -> set[str]:
    """Replicas that every router of `routers` reporting them calls failing (one router's view
    of its own network path is not enough to suspect a node)."""
    known = set(routers)
    seen: dict[str, bool] = {}
    for r in reports:
        if r.router not in known:
            continue
        for rid, load in r.replicas.items():
            seen[rid] = seen.get(rid, True) and load.failing
    return {rid for rid, failing in seen.items() if failing}


def nodes_to_refresh(failing: Iterable[str], state: State, last: Mapping[str, float], now: float,
                     every: float = REFRESH_EVERY) -> list[str]:
    """The nodes of the failing replicas (per the state) not refreshed in the last `every` s."""
    wanted = set(failing)
    nodes = {s.node for r in state.replicas if r.id in wanted for s in r.shards}
    return sorted(n for n in nodes if n not in last or now - last[n] >= every)


@dataclass
class Refresher:
    say: Callable[[str], None]
    gather: Gather = gather
    every: float = REFRESH_EVERY
    last: dict[str, float] = field(default_factory=dict)  # node -> monotonic time of its last refresh

    def refresh(self, site: Site, reports: Iterable[Report], routers: Iterable[str],
                state: Callable[[], State], now: float) -> bool:
        """Gather facts of the nodes whose replicas fail; True when one's reachability changed.
        `state` is read only when some replica fails (the demand tick runs every few seconds).
        A gathering that fails outright (no such node any more, Ansible broken) is said, not
        raised: the scaler's tick still runs, and the node is tried again after `every`."""
        failing = failing_replicas(reports, routers)
        if not failing:
            return False
        nodes = nodes_to_refresh(failing, state(), self.last, now, self.every)
        if not nodes:
            return False
        for n in nodes:
            self.last[n] = now
        self.say(f"facts: refreshing {', '.join(nodes)}: routers report replica(s) "
                 f"{', '.join(sorted(failing))[:300]} failing")
        before = {h: f.stale for h, f in read_facts(site.facts_dir).items() if h in nodes}
        try:
            report = self.gather(site, limit=",".join(nodes))
        except LlmgwError as exc:
            self.say(f"facts: refreshing {', '.join(nodes)} failed: {exc.message}")
            return False
        changed = False
        for host, outcome in sorted(report.hosts.items()):
            stale = outcome.facts.stale if outcome.facts is not None else None
            if stale is not None and before.get(host) != stale:
                changed = True
            self.say(f"facts: {host}: {outcome.outcome}" + (f" ({outcome.reason})" if outcome.reason else ""))
        return changed
