"""Apply a plan step by step, writing the state after every step.

The order (docs/architecture.md, "Apply: rolling and safe"):

1. new replicas: weights fetched on their hosts; the replica recorded `starting`
   (before any unit exists, so a kill leaves a record of every unit that may run);
   units rendered, verified and started; engine health waited for; recorded `ready`
   and delivered to the routers, which must report they know it;
2. the replicas they replace, one pair at a time: recorded `draining` and delivered;
   every router asked (through Ansible, on its loopback admin API) until it has
   nothing in flight on them, or the grace period passes; units stopped and removed
   (in the same Ansible run, and only where every router loaded the draining state:
   Hosts.drain); the replica removed from the state and delivered again;
3. destroyed replicas the same way, then units the state never recorded (drift).

A replica going away from a lost node (the plan's `unreached`, llmgw.nodetime) is removed
from the state without contacting that host: it stopped answering, and an Ansible run
against it would only fail. Its units there, should it come back, are strays to the next plan.

A kill at any point leaves a state that tells the truth: a `starting` or `draining`
replica is destroyed by the next plan (and replaced when the catalog still wants it),
which the next apply carries out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmgw.apply.delivery import deliveries_for
from llmgw.apply.hosts import Hosts, Progress
from llmgw.engines import Device, max_running
from llmgw.errors import PlanError, RunnerError
from llmgw.inventory import DEFAULT_CACHE_DIR, Inventory
from llmgw.planner import Action, Plan, PlannedReplica, PlannedShard, loaded_adapters
from llmgw.state import LocalBackend, ModelRecord, Replica, ReplicaState, Shard, State, StateBackend, WriteMeta

Say = Callable[[str], None]
"""One line about what apply is doing now, for people."""


def check_fresh(plan: Plan, state: State) -> None:
    """Refuse a plan made against another state than the one on disk (stale or foreign)."""
    if plan.state_lineage and state.lineage and plan.state_lineage != state.lineage:
        raise PlanError(f"the plan was made for another state (lineage {plan.state_lineage}, "
                        f"this state is {state.lineage})", hint="make a new plan with `llmgw plan --out FILE`")
    if plan.state_serial != state.serial:
        raise PlanError(f"the plan is stale: it was made against state serial {plan.state_serial}, "
                        f"and the state is at serial {state.serial} now",
                        hint="make a new plan with `llmgw plan --out FILE` (or run `llmgw apply` without a file)")


def unit_base(unit: str) -> str:
    return unit.removesuffix(".service")


@dataclass
class Outcome:
    """What an apply did, for the summary line and tests."""

    created: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)
    grace_expired: list[str] = field(default_factory=list)
    serial: int = 0


class Applier:
    """Carries out one plan against the hosts, recording every step in the state file."""

    def __init__(self, *, plan: Plan, state_file: Path, inventory: Inventory, hosts: Hosts,
                 wheelhouse: Callable[[], Path], grace: float = 120.0, progress: Progress | None = None,
                 say: Say | None = None, fabric_hcas: Callable[[str, str], list[str]] | None = None,
                 backend: StateBackend | None = None, meta: WriteMeta | None = None, routers_installed: bool = False,
                 verify: Callable[[Sequence[PlannedReplica]], None] | None = None,
                 gpu_device: Callable[[PlannedShard], Device | None] | None = None) -> None:
        self.plan, self.gpu_device = plan, gpu_device or (lambda _s: None)  # a shard's first GPU: vLLM's defaults
        # Checks new replicas (catalog `requires:`, llmgw.probe.verify) before they are recorded
        # ready; raising leaves them `starting`, for the next plan to replace.
        self.verify = verify
        # Where the state is kept (a file, or PostgreSQL keeping its last copy at state_file,
        # the file the routers are sent), and who is writing, for its history.
        self.backend = backend or LocalBackend(state_file)
        self.deliveries = deliveries_for(self.backend)  # which serial each router was seen to load
        self.meta = meta or WriteMeta("apply")
        self.state_file = state_file
        self.inventory = inventory
        self.hosts = hosts
        self.wheelhouse = wheelhouse
        self.grace = grace
        self.progress = progress
        self.say = say or (lambda _line: None)
        self.fabric_hcas = fabric_hcas  # (node, fabric) -> the node's adapters on it, for NCCL_IB_HCA
        self.state = self.backend.read()
        self.outcome = Outcome(serial=self.state.serial)
        self._wheelhouse: Path | None = None
        self._undelivered = False  # the routers have not seen the latest state yet
        # The router role ran in full once in this apply. `routers_installed`: the controller's
        # demand runs, which change one replica and nothing of the routers' service (installed
        # and checked by the apply that made them routers), deliver the state alone; the full
        # role on every router took minutes of each scale action on a loaded machine.
        self._routers_checked = routers_installed

    # -- the state ----------------------------------------------------------------------

    def _write(self, state: State) -> None:
        self.state = self.backend.write(state, expect_serial=self.state.serial, meta=self.meta)
        self.outcome.serial = self.state.serial

    def _set_replicas(self, replicas: list[Replica], models: list[ModelRecord] | None = None) -> None:
        update: dict[str, Any] = {"replicas": sorted(replicas, key=lambda r: (r.model, r.id))}
        if models is not None:
            update["models"] = models
        self._write(self.state.model_copy(update=update))

    def _mark(self, ids: Sequence[str], new_state: ReplicaState) -> None:
        wanted = set(ids)
        self._set_replicas([r.model_copy(update={"state": new_state}) if r.id in wanted else r
                            for r in self.state.replicas])

    def _models_during(self) -> list[ModelRecord]:
        """The desired models, plus the records of models still running replicas."""
        desired = {m.name: m for m in self.plan.desired.models}
        for m in self.state.models:
            if m.name not in desired and any(r.model == m.name for r in self.state.replicas):
                desired[m.name] = m
        return [desired[n] for n in sorted(desired)]

    # -- routers ------------------------------------------------------------------------

    def _deliver(self, present: Sequence[str] = (), idle: Sequence[str] = (), timeout: float = 60.0,
                 stop: Mapping[str, list[dict[str, Any]]] | None = None) -> list[str]:
        """Give the routers the state and wait until they hold it; returns ids still busy after timeout.

        `stop` (host -> absent shard entries): stop those shards after the wait, in the same
        Ansible run (Hosts.drain), and only once every router holds the state."""
        self._undelivered = False
        if not self.hosts.routers:
            if stop:
                self.hosts.engines({}, stop, "stop", self.progress)
            return []
        if self._wheelhouse is None:
            self.say("Preparing the router's wheelhouse")
            self._wheelhouse = self.wheelhouse()
        self.say(f"Delivering state serial {self.state.serial} to {', '.join(self.hosts.routers)}"
                 + (f", waiting until {', '.join(idle)} are idle" if idle else ""))
        if stop:
            views = self.hosts.drain(self.state_file, self._wheelhouse, serial=self.state.serial, idle=idle,
                                     timeout=timeout, stop=stop, state_only=self._routers_checked,
                                     progress=self.progress)
        else:
            views = self.hosts.deliver(self.state_file, self._wheelhouse, serial=self.state.serial, present=present,
                                       idle=idle, timeout=timeout, state_only=self._routers_checked,
                                       progress=self.progress)
        self._routers_checked = True
        busy: set[str] = set()
        for v in views:
            if v.serial is None or v.serial < self.state.serial or not set(present) <= set(v.in_flight):
                raise RunnerError(f"router {v.host} did not load state serial {self.state.serial}",
                                  detail=[f"it reports serial {v.serial}"],
                                  hint="look at `journalctl -u llmgw-router` on that host")
            busy |= {i for i in idle if v.in_flight.get(i, 0) > 0}
        self.deliveries.mark_delivered(self.hosts.routers, self.state.serial)
        return sorted(busy)

    # -- steps --------------------------------------------------------------------------

    def _shard_entry(self, r: PlannedReplica, rank: int) -> dict[str, Any]:
        s = next(x for x in r.shards if x.rank == rank)
        host = self.inventory.nodes.get(s.node)
        cache_dir = host.cache_dir if host is not None else DEFAULT_CACHE_DIR
        leader = r.shards[0]
        # `lineage` marks the unit as this state's, so another state's plans leave it alone.
        return {"unit": unit_base(s.unit), "state": "present", "replica": r.id, "model": r.model,
                "lineage": self.state.lineage,
                "model_path": s.present_at or f"{cache_dir.rstrip('/')}/{r.cache_name}", "engine": r.engine,
                "port": s.port,
                "gpus": list(s.gpus), "args": list(r.args or []), "env": dict(r.env or {}),
                "trust_remote_code": bool(r.trust_remote_code), "rank": s.rank,
                "nodes": len(r.shards), "leader": leader.address,
                "peers": [f"{x.address}:{x.port}" for x in sorted(r.shards, key=lambda x: x.rank)],
                "fabric": r.fabric or "", "ib_hcas": self._shard_hcas(r, s),
                # Where the plan put its GPUs (llmgw.planner.topology): UUIDs for CUDA_VISIBLE_DEVICES,
                # and the NUMA node to bind CPUs and memory to (None: no binding).
                "gpu_uuids": list(s.topology.gpu_uuids) if s.topology else [],
                "numa_node": s.topology.numa_node if s.topology and s.topology.numa_bind else None,
                # LoRA adapters from the same cache as the base (docs/adapters.md); rank 0 serves them.
                "adapters": [{"name": a.name, "path": f"{cache_dir.rstrip('/')}/{a.cache_name}",
                              **({"rank": a.rank} if a.rank is not None else {})}
                             for a in r.adapters or []] if s.rank == 0 else [],
                **({"max_loras": r.max_loras} if r.max_loras and s.rank == 0 else {})}  # loaded at run time

    def _shard_hcas(self, r: PlannedReplica, s: PlannedShard) -> list[str]:
        """NCCL_IB_HCA: the adapters the plan chose nearest the shard's GPUs, else the node's on the fabric."""
        if len(r.shards) <= 1:
            return []
        if s.topology is not None and s.topology.ib_hcas is not None:
            return list(s.topology.ib_hcas)
        return self._hcas(s.node, r.fabric)

    def _hcas(self, node: str, fabric: str | None) -> list[str]:
        if fabric is None or self.fabric_hcas is None:
            return []
        return self.fabric_hcas(node, fabric)

    def _bring_up(self, replicas: Sequence[PlannedReplica]) -> None:
        if not replicas:
            return
        ids = [r.id for r in replicas]
        weights: dict[str, list[dict[str, str]]] = {}
        for r in replicas:
            if r.source is None or r.cache_name is None:
                raise PlanError(f"the plan has no source for new replica {r.id}", hint="make a new plan")
            for s in r.shards:
                # An operator's copy is served where it is: the host checks it and fetches nothing.
                entry = {"source": r.source, "name": r.cache_name}
                if s.present_at is not None:
                    entry["present_at"] = s.present_at
                if entry not in weights.setdefault(s.node, []):
                    weights[s.node].append(entry)
                # Its LoRA adapters, fetched beside the base by the same role (cache, GC, progress, single-flight).
                for a in (r.adapters or []) if s.rank == 0 else []:
                    extra = {"source": a.source, "name": a.cache_name}
                    if extra not in weights[s.node]:
                        weights[s.node].append(extra)
        now = datetime.now(UTC)
        records = [Replica(id=r.id, model=r.model, profile=r.profile, engine=r.engine, state="starting",
                           endpoint=r.endpoint, spec_hash=r.spec_hash, created_at=now, cache_name=r.cache_name,
                           source=r.source, adapters=loaded_adapters(r),  # max_running: admission's default
                           max_running=max_running(r.engine, r.args or [], gpus=len(r.shards[0].gpus),
                                                   nodes=len(r.shards), device=self.gpu_device(r.shards[0])),
                           shards=[Shard(node=s.node, rank=s.rank, gpus=list(s.gpus), port=s.port, unit=s.unit)
                                   for s in r.shards]) for r in replicas]
        known = {r.id for r in self.state.replicas}
        # Recorded before anything happens on a host: a kill from here on leaves a record of
        # every unit that may run, and the next plan stops and replaces what was half started.
        self._set_replicas([*self.state.replicas, *(r for r in records if r.id not in known)],
                           models=self._models_during())
        shards: dict[str, list[dict[str, Any]]] = {}
        for r in replicas:
            # Workers (rank > 0) before their leader is harmless: a leader waits for them.
            for s in sorted(r.shards, key=lambda x: -x.rank):
                shards.setdefault(s.node, []).append(self._shard_entry(r, s.rank))
        self.say(f"Fetching weights and starting {', '.join(ids)}; waiting for their health")
        self.hosts.engines(weights, shards, "start", self.progress)
        if self.verify is not None:
            self.verify(replicas)
        self._mark(ids, "ready")
        self._deliver(present=ids)
        self.outcome.created.extend(ids)
        for r in replicas:
            self.say(f"{r.id} is ready at {r.endpoint}")

    def _take_down(self, ids: Sequence[str], unreached: Collection[str] = ()) -> None:
        doomed = [r for r in self.state.replicas if r.id in set(ids)]
        if not doomed:
            return
        names = [r.id for r in doomed]
        self._mark(names, "draining")
        stop = self._stops([(s.node, s.unit) for r in doomed for s in r.shards], unreached)
        self.say(f"Draining {', '.join(names)} (grace {self.grace:g} s)"
                 + (f", then stopping {', '.join(sorted(e['unit'] for es in stop.values() for e in es))}"
                    if stop else ""))
        busy = self._deliver(idle=names, timeout=self.grace, stop=stop)
        if busy:
            self.say(f"Grace period over with requests still in flight on {', '.join(busy)}; stopped anyway")
            self.outcome.grace_expired.extend(busy)
        gone = set(names)
        self._set_replicas([r for r in self.state.replicas if r.id not in gone], models=self._models_during())
        self._undelivered = True  # the routers learn it with the next delivery (at the latest, the last)
        self.outcome.destroyed.extend(names)

    def _keep_floor(self, a: Action) -> None:
        """Refuse to take a ready replica away without its ready replacement when that drops
        the model below `scaling.min` ready replicas (a hand-edited or truncated plan file)."""
        old = next((r for r in self.state.replicas if r.id == a.replaces), None)
        if old is None or old.state != "ready":
            return
        ready = [r for r in self.state.replicas if r.model == old.model and r.state == "ready" and r.id != old.id]
        floor = next((m.scaling.min for m in self.plan.desired.models if m.name == old.model), 0)
        if len(ready) < floor and all(r.id != a.replica for r in ready):
            raise PlanError(f"replacing {old.id} would leave {old.model} with {len(ready)} ready replicas, below "
                            f"its scaling.min {floor}: its replacement {a.replica} is not ready",
                            hint="make a new plan with `llmgw plan` (this one has no replacement to start)")

    def _stop_units(self, units: Sequence[tuple[str, str]], unreached: Collection[str] = ()) -> None:
        by_host = self._stops(units, unreached)
        if by_host:
            self.say(f"Stopping {', '.join(sorted(u for _n, u in units))}")
            self.hosts.engines({}, by_host, "stop", self.progress)

    def _stops(self, units: Sequence[tuple[str, str]],
               unreached: Collection[str] = ()) -> dict[str, list[dict[str, Any]]]:
        """host -> absent entries for `units`, leaving out (and saying so) hosts gone or lost."""
        by_host: dict[str, list[dict[str, Any]]] = {}
        for node, unit in units:
            if node not in self.inventory.nodes:
                self.say(f"{node} is no longer in the inventory; {unit} is left to whoever removed it")
                continue
            if node in unreached:
                self.say(f"{node} is lost: {unit} is removed from the state only, without contacting the host; "
                         "if it comes back, the next plan stops the unit there as a stray")
                continue
            by_host.setdefault(node, []).append({"unit": unit_base(unit), "state": "absent"})
        return by_host

    # -- the whole ----------------------------------------------------------------------

    def run(self) -> Outcome:
        check_fresh(self.plan, self.state)
        planned = {r.id: r for r in self.plan.desired.replicas}
        by_kind: dict[str, list[Action]] = {}
        for a in self.plan.actions:
            by_kind.setdefault(a.action, []).append(a)
        creates = [planned[a.replica] for a in by_kind.get("create", []) if a.replica in planned]
        self._bring_up(creates)
        for a in by_kind.get("replace", []):
            if a.replica in planned:
                self._bring_up([planned[a.replica]])
            if a.replaces:
                self._keep_floor(a)
                self._take_down([a.replaces], a.unreached)
        destroys = by_kind.get("destroy", [])
        self._take_down([a.replica for a in destroys if a.replica and not a.stray],
                        {n for a in destroys if not a.stray for n in a.unreached})
        strays = [(u.node, u.unit) for a in destroys if a.stray for u in a.units]
        if strays:
            self._stop_units(strays)
            self.outcome.strays.extend(u for _n, u in strays)
        desired_models = list(self.plan.desired.models)
        if self.state.models != desired_models or self.outcome.serial == self.plan.state_serial:
            self._set_replicas(list(self.state.replicas), models=desired_models)
            self._undelivered = True
        if self._undelivered or self.deliveries.routers_behind(self.hosts.routers, self.state.serial):
            self._deliver()
        return self.outcome

    def catch_up_routers(self) -> list[str]:
        """Deliver the state to routers not known to hold it (an apply killed before delivering),
        even when the plan changes nothing; returns them. Contacts no engine host, and no host
        at all when every router is current."""
        behind = self.deliveries.routers_behind(self.hosts.routers, self.state.serial)
        if behind:
            known = self.deliveries.delivered()
            self._routers_checked = all(r in known for r in self.hosts.routers)  # installed once before
            self._deliver()
        return behind
