"""The reconciler: the catalog's wish against the last applied state, as a plan (`schema.py`).

`make_plan(inputs)` is pure and deterministic: the same inputs give byte-identical JSON
(every list sorted, no set order leaking; the clock only as `inputs.now`). `llmgw apply` consumes the JSON
(`load_plan`); `schema.py` is the contract between the two.

How the state is reconciled, replica by replica:
- kept where it runs, unless its node is draining, lost (llmgw.nodetime) or gone from the
  inventory, its definition changed (spec hash of source + profile), or the facts show its
  units gone: then replaced (the new one created first, the old one drained and destroyed
  after). One that nothing can take stays, except on a lost or gone node (destroyed: nothing
  runs there) and past its node's drain deadline (destroyed, even below `scaling.min`);
- destroyed when its model left the catalog, when more run than `scaling.max`, or when
  it was already being drained when the last apply stopped;
- `scaling.min` replicas are kept running; more (up to max) are left alone, since those
  are on-demand replicas a router started; min 0 models are listed as on demand.
Units of the state's lineage that the state does not record are destroyed (drift); units
of another lineage belong to another state and are left alone; an empty state while
llmgw units run is refused (it is most likely the wrong state).

Why long: one `_Planner` whose steps (classify the state, strays, scale down, replace,
place new, finish) all read and take from the same fleet as this plan fills it; spread
over modules, each step would pass that state around instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from llmgw import collector
from llmgw.catalog import Model, Profile, format_duration, profile_adapters
from llmgw.errors import PlanError
from llmgw.nodetime import DEFAULT_DRAIN_DEADLINE, Liveness, format_time, liveness
from llmgw.planner import schema
from llmgw.planner.fleet import MB_PER_GB, Fleet, NodeView, fmt_gb
from llmgw.planner.inputs import PlanInputs
from llmgw.planner.placement import Choice, Need, Verdict, choose, rejections, verdicts
from llmgw.planner.routes import route_change, route_record, split_text
from llmgw.planner.schema import replica_sort_key
from llmgw.planner.spec import endpoint_url, parse_unit, spec_hash, unit_name
from llmgw.planner.topology import GpuMap, Pick, gpu_map, nearest_hcas, pick_gpus, topology_signature, uuids_of
from llmgw.state import AdapterRecord, ModelRecord, Replica, ScalingRecord, Shard
from llmgw.weights.hub import is_repo_source
from llmgw.weights.names import cache_name


@dataclass
class Attempt:
    """One placement attempt of one replica, recorded for `llmgw explain`."""

    replica: str
    profiles: list[tuple[str, list[Verdict], list[str]]] = field(default_factory=list)  # profile, verdicts, chosen


@dataclass
class Trace:
    model: str
    attempts: list[Attempt] = field(default_factory=list)
    final_verdicts: dict[str, list[Verdict]] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)  # nodes planned with their last good (stale) facts


@dataclass
class _Replacing:
    old: Replica
    code: schema.ReasonCode
    reason: str
    destroy_if_unplaced: bool
    draining: list[str] = field(default_factory=list)  # its draining nodes
    deadline: datetime | None = None  # when staying on them ends (the earliest of their deadlines)
    unreached: list[str] = field(default_factory=list)  # its lost nodes (llmgw.nodetime)


def _units_fresh(view: NodeView) -> bool:
    """Whether a node's facts list its units and are current enough to claim drift."""
    f = view.facts
    return f is not None and f.units is not None and not f.stale


def _record(m: Model) -> ModelRecord:
    s = m.scaling
    return ModelRecord(name=m.name, aliases=list(m.aliases), fallbacks=list(m.fallbacks),
                       scaling=ScalingRecord(min=s.min, max=s.maximum, idle_timeout=s.idle_timeout),
                       routing=m.routing,
                       max_in_flight={p.name: p.max_in_flight for p in m.profiles if p.max_in_flight is not None},
                       adapters=[AdapterRecord(name=a.name, aliases=list(a.aliases), scale_percent=round(a.scale * 100))
                                 for a in m.adapters],
                       max_loras=m.max_loras if m.adapter_loading == "runtime" else None)


def _record_change(old: ModelRecord, new: ModelRecord) -> str:
    parts = []
    for key in ("aliases", "fallbacks", "routing", "max_in_flight", "max_loras"):
        a, b = getattr(old, key), getattr(new, key)
        if a != b:
            parts.append(f"{key} {a} -> {b}")
    for key in ("min", "max", "idle_timeout"):
        a, b = getattr(old.scaling, key), getattr(new.scaling, key)
        if a != b:
            parts.append(f"scaling.{key} {a} -> {b}")
    if old.adapters != new.adapters:  # names, aliases or scale: the routers serve them so from now on
        parts.append(f"adapters {[a.name for a in old.adapters]} -> {[a.name for a in new.adapters]}")
    parts.extend(route_change(old.route, new.route))  # weighted routes: the split before -> after
    return "; ".join(parts)


class _Planner:
    def __init__(self, inputs: PlanInputs, trace: str | None) -> None:
        self.inputs = inputs
        self.catalog = inputs.catalog
        self.state = inputs.state
        self.fleet = Fleet(inputs.nodes, inputs.facts, inputs.fabrics, inputs.ports, inputs.weight_sizes,
                           inputs.weight_files)
        self.liveness: dict[str, Liveness] = {}
        for view in self.fleet.nodes:
            found = liveness(view.facts, inputs.now, inputs.unreachable_after, inputs.lost_after)
            if found is not None:
                self.liveness[view.name] = found
                view.unreachable = found.sentence(view.name)
        self.trace = Trace(trace) if trace else None
        self.used_ids = {r.id for r in self.state.replicas}
        self.cache_names = {m.source: cache_name(m.source) for m in self.catalog}
        self.actions: list[schema.Action] = []
        self.desired: list[schema.PlannedReplica] = []
        self.unplaced: dict[str, schema.Unplaced] = {}
        self.target: dict[str, int] = {}
        self._next_n: dict[str, int] = {}
        self._specs: dict[tuple[str, str], str] = {}
        # node -> its GPUs' topology (llmgw.planner.topology) and UUIDs by index
        self._gpu_maps: dict[str, tuple[GpuMap | None, dict[int, str]]] = {}
        self._maps_by_sig: dict[tuple[object, ...], GpuMap | None] = {}
        self._picks: dict[tuple[int, tuple[int, ...], int], Pick] = {}  # (map, free GPUs, how many) -> pick
        self._needs: dict[tuple[str, str], Need] = {}
        self._profiles: dict[tuple[str, str], tuple[Model | None, Profile | None]] = {}
        self._units: dict[str, tuple[NodeView, set[str]] | None] = {}
        self.foreign: list[str] = []  # notes on units of another state's lineage
        self.foreign_held: dict[str, list[str]] = {}  # node -> what another state's units hold there

    # -- the state, replica by replica -------------------------------------------------

    def _fresh_units(self, node: str) -> tuple[NodeView, set[str]] | None:
        """A node's units, when its facts are known and current enough to claim drift."""
        if node in self._units:  # asked per shard in the state: once per node is enough (facts do not change)
            return self._units[node]
        view = self.fleet.by_name.get(node)
        found = None
        if view is not None and _units_fresh(view):
            assert view.facts is not None and view.facts.units is not None
            found = view, {u.name for u in view.facts.units}
        self._units[node] = found
        return found

    def _missing_units(self, r: Replica) -> list[Shard]:
        missing = []
        for s in r.shards:
            seen = self._fresh_units(s.node)
            if seen is None or r.created_at is None:
                continue
            view, units = seen
            assert view.facts is not None
            if s.unit not in units and view.facts.gathered_at > r.created_at:
                missing.append(s)
        return missing

    def _profile(self, r: Replica) -> tuple[Model | None, Profile | None]:
        key = (r.model, r.profile)  # asked twice per replica in the state (10,000 at 4,096 hosts)
        found = self._profiles.get(key)
        if found is None:
            model = self.catalog.models.get(r.model)
            profile = next((p for p in model.profiles if p.name == r.profile), None) if model else None
            found = self._profiles[key] = (model, profile)
        return found

    def _reserve(self, r: Replica, skip: Iterable[Shard] = ()) -> None:
        model, profile = self._profile(r)
        skipped = {(s.node, s.rank) for s in skip}
        for s in r.shards:
            node = self.fleet.by_name.get(s.node)
            if node is None or (s.node, s.rank) in skipped:
                continue
            source = model.source if model else None
            self.fleet.take(node, s.gpus, profile.min_memory_gb if profile else 0.0, s.port, source,
                            self.cache_names.get(source or "", ""), self._size(model))

    def _size(self, model: Model | None) -> int | None:
        return None if model is None else self.inputs.weight_sizes.get(model.source)

    def _lost_nodes(self, r: Replica) -> list[str]:
        return sorted({s.node for s in r.shards if (lv := self.liveness.get(s.node)) and lv.condition == "lost"})

    def _destroy(self, r: Replica, code: schema.ReasonCode, reason: str) -> None:
        units = [schema.UnitRef(node=s.node, unit=s.unit) for s in sorted(r.shards, key=lambda s: (s.rank, s.node))]
        self.actions.append(schema.Action(action="destroy", replica=r.id, model=r.model, code=code, reason=reason,
                                   units=units, unreached=self._lost_nodes(r)))

    def _classify(self) -> tuple[dict[str, list[Replica]], dict[str, list[_Replacing]]]:
        kept: dict[str, list[Replica]] = {}
        replacing: dict[str, list[_Replacing]] = {}
        for r in sorted(self.state.replicas, key=lambda r: replica_sort_key(r.id, r.model)):
            model, profile = self._profile(r)
            missing = self._missing_units(r)
            self._reserve(r, skip=missing)
            if r.state == "draining":
                self._destroy(r, "was_draining", "it was being drained when the last apply stopped")
                continue
            if r.state == "starting":
                # An apply stopped between starting its units and recording it ready: its units
                # may or may not run, so it is stopped and removed, and replaced when still wanted.
                self._destroy(r, "was_starting", "it was being started when the last apply stopped")
                continue
            if model is None:
                self._destroy(r, "model_removed", f"model {r.model} is no longer in the catalog")
                continue
            gone = sorted({s.node for s in r.shards if s.node not in self.fleet.by_name})
            draining = sorted({s.node for s in r.shards if s.node in self.fleet.by_name
                               and self.fleet.by_name[s.node].host.node_state == "draining"})
            lost = self._lost_nodes(r)
            why: _Replacing | None = None
            if gone:
                why = _Replacing(r, "node_gone", f"node {', '.join(gone)} is gone from the inventory", True)
            elif lost:
                why = _Replacing(r, "node_lost", "; ".join(self.liveness[n].sentence(f"node {n}") for n in lost),
                                 True, unreached=lost)
            elif missing:
                units = ", ".join(f"{s.unit} on {s.node}" for s in missing)
                why = _Replacing(r, "units_gone", f"its units are gone from the hosts ({units})", True)
            elif draining:
                ends = [d for n in draining if (d := self.fleet.by_name[n].host.drain_deadline) is not None]
                why = _Replacing(r, "node_draining", f"node {', '.join(draining)} is draining", False,
                                 draining=draining, deadline=min(ends) if ends else None)
            elif profile is None:
                why = _Replacing(r, "profile_removed", f"profile {r.profile} is no longer in the catalog", False)
            elif self._spec(model, profile) != r.spec_hash:
                why = _Replacing(r, "definition_changed",
                                 f"its definition changed (source or profile {profile.name})", False)
            if why is None:
                kept.setdefault(r.model, []).append(r)
            else:
                replacing.setdefault(r.model, []).append(why)
        return kept, replacing

    def _unit_lineages(self) -> list[tuple[str, str, str | None]]:
        """(node, unit, lineage) of every llmgw shard unit fresh facts show."""
        found: list[tuple[str, str, str | None]] = []
        for node in self.fleet.nodes:
            f = node.facts
            if f is None or f.units is None or not _units_fresh(node):  # no set of names built per node
                continue
            found.extend((node.name, u.name, u.lineage) for u in sorted(f.units, key=lambda u: u.name)
                         if parse_unit(u.name) is not None)
        return found

    def _refuse_empty_state(self, units: list[tuple[str, str, str | None]]) -> None:
        """An empty state while hosts run llmgw units: most likely the wrong state, not drift."""
        if not units or (self.state.lineage and (self.state.serial or self.state.replicas)):
            return
        lineages = sorted({lin or "not recorded" for _n, _u, lin in units})
        shown = [f"{u} on {n} (lineage {lin or 'not recorded'})" for n, u, lin in units[:10]]
        if len(units) > 10:
            shown.append(f"... and {len(units) - 10} more")
        raise PlanError(f"the state is empty, but the hosts run {len(units)} llmgw unit(s) of lineage "
                        f"{', '.join(lineages)}; refusing to plan them away as drift", detail=shown,
                        hint="point `state:` in llmgw.yaml at the state that made them (`llmgw -C OTHER_SITE state "
                             "show` names its lineage), or adopt them deliberately with `llmgw state import "
                             "--lineage LINEAGE` (its plans then manage, and may destroy, those units)")

    def _strays(self) -> None:
        """Units of this state's lineage on a node that no replica in the state records: drift,
        destroyed. Units of another lineage belong to another state: left alone, never drift."""
        present = self._unit_lineages()
        self._refuse_empty_state(present)
        recorded = {(s.node, s.unit) for r in self.state.replicas for s in r.shards}
        found: dict[str, list[schema.UnitRef]] = {}
        for node, unit, lineage in present:
            parsed = parse_unit(unit)
            assert parsed is not None
            if lineage is not None and lineage != self.state.lineage:
                self.used_ids.add(parsed[0])  # never reuse its id: the unit name would clash
                held = self._reserve_foreign(node, unit)
                self.foreign.append(f"{node}: {unit} belongs to another state (lineage {lineage}); left alone"
                                    + (f", its {held} kept free" if held else ""))
                if held:
                    self.foreign_held.setdefault(node, []).append(f"{unit} of lineage {lineage}: {held}")
            elif (node, unit) not in recorded:
                found.setdefault(parsed[0], []).append(schema.UnitRef(node=node, unit=unit))
        for rid, units in sorted(found.items()):
            self.used_ids.add(rid)
            model = rid.rsplit("-", 1)[0]
            where = ", ".join(f"{u.unit} on {u.node}" for u in units)
            self.actions.append(schema.Action(action="destroy", replica=rid, model=model, stray=True, units=units,
                                       code="stray", reason=f"the state records no such replica ({where})"))

    def _reserve_foreign(self, node: str, unit: str) -> str:
        """Take the GPUs and memory facts show another state's unit using, so this plan puts
        nothing on them; what was taken, for people ("" when facts show none)."""
        view = self.fleet.by_name[node]
        assert view.facts is not None and view.facts.units is not None
        u = next(x for x in view.facts.units if x.name == unit)
        gpus = sorted(set(u.gpus or []) - view.used)
        mem_gb = (u.memory_mb or 0) / MB_PER_GB
        if not gpus and not mem_gb:
            return ""
        self.fleet.take(view, gpus, mem_gb, None, None, "", None)
        parts = [f"GPU{'s' if len(gpus) > 1 else ''} {', '.join(map(str, gpus))}"] if gpus else []
        return " and ".join(parts + ([f"{fmt_gb(mem_gb)} GB of memory"] if mem_gb else []))

    # -- placement ------------------------------------------------------------------------

    def _new_id(self, model: str) -> str:
        """`<model>-<n>` with the smallest n in use nowhere (state, strays, this plan)."""
        n = self._next_n.get(model, 1)
        while f"{model}-{n}" in self.used_ids:
            n += 1
        self._next_n[model] = n + 1
        rid = f"{model}-{n}"
        self.used_ids.add(rid)
        return rid

    def _spec(self, model: Model, profile: Profile) -> str:
        key = (model.name, profile.name)
        if key not in self._specs:
            self._specs[key] = spec_hash(model, profile)
        return self._specs[key]

    def _need(self, model: Model, profile: Profile) -> Need:
        key = (model.name, profile.name)
        need = self._needs.get(key)
        if need is None:
            need = Need(model, profile, self.cache_names[model.source], self._size(model))
            self._needs[key] = need
        return need

    def _allocate(self, rid: str, model: Model, profile: Profile, choice: Choice) -> schema.PlannedReplica:
        runtime = model.adapter_loading == "runtime"
        leader_cache = choice.nodes[0].host.cache_dir.rstrip("/")

        def runtime_at(source: str) -> str | None:
            """Loaded at run time: where apply fetches it on rank 0's host (the router's load names it)."""
            return f"{leader_cache}/{cache_name(source)}" if runtime else None

        shards = []
        size = self._size(model)
        for rank, node in enumerate(choice.nodes):
            gpus, topology = self._gpus_for(node, profile, choice.fabric)
            port = node.free_port(self.fleet.ports)
            assert port is not None and len(gpus) == profile.gpus
            name = self.cache_names[model.source]
            self.fleet.take(node, gpus, profile.min_memory_gb, port, model.source, name, size)
            shards.append(schema.PlannedShard.placed(node=node.name, rank=rank, gpus=gpus, port=port,
                                                     unit=unit_name(rid, rank), address=node.host.mgmt_address,
                                                     present_at=self.fleet.copy_at(node, model.source, name),
                                                     topology=topology))
        return schema.PlannedReplica.placed(
            id=rid, model=model.name, profile=profile.name, engine=profile.engine, shards=shards,
            endpoint=endpoint_url(shards[0].address, shards[0].port), spec_hash=self._spec(model, profile),
            fabric=choice.fabric, source=model.source, cache_name=self.cache_names[model.source],
            args=list(profile.args), env=dict(profile.env), trust_remote_code=profile.trust_remote_code or None,
            adapters=[schema.PlannedAdapter(name=a.name, source=a.source, cache_name=cache_name(a.source),
                                            rank=self.inputs.adapter_ranks.get(a.source), path=runtime_at(a.source))
                      for a in profile_adapters(model, profile.name)] or None,
            max_loras=model.max_loras if runtime else None)

    def _gpus_for(self, node: NodeView, profile: Profile, fabric: str | None,
                  ) -> tuple[list[int], schema.ShardTopology | None]:
        """The shard's GPU indices on `node`, packed by its topology, and what the plan shows of
        where they sit and which UUIDs they have (None for a CPU shard, or a host whose facts
        know neither)."""
        if profile.gpus == 0:
            return [], None
        free = node.free(profile.gpu_class)
        known = self._gpu_maps.get(node.name)
        if known is None:
            gpus = node.gpus or []
            # Hosts of one model share one map (and its picks): built once, not per host.
            sig = topology_signature(gpus)
            built: GpuMap | None = None
            if sig is not None:
                if sig not in self._maps_by_sig:
                    self._maps_by_sig[sig] = gpu_map(gpus)
                built = self._maps_by_sig[sig]
            known = self._gpu_maps[node.name] = (built, uuids_of(gpus))
        m, by_index = known
        if m is None:
            picked = pick_gpus(free, profile.gpus, None)
        else:
            slot = (id(m), tuple(free), profile.gpus)
            picked = self._picks.get(slot) or self._picks.setdefault(slot, pick_gpus(free, profile.gpus, m))
        uuids = [by_index[i] for i in picked.gpus] if all(i in by_index for i in picked.gpus) else []
        if m is None and not uuids:
            return list(picked.gpus), None
        hcas: list[str] | None = None
        why: str | None = None
        if fabric is not None and m is not None:
            rails = list(self.fleet.fabric_index.leaves_of(node.name, fabric))
            hcas, why = nearest_hcas(rails, node.facts.ib_adapters if node.facts else None, picked.gpus, m)
        bind = profile.numa == "bind" and picked.numa_node is not None
        return list(picked.gpus), schema.ShardTopology.trusted(picked.level, picked.numa_node, bind, uuids, hcas,
                                                               why)

    def _place(self, model: Model, rid_for: str) -> tuple[schema.PlannedReplica | None, list[schema.Rejection]]:
        """One replica of `model`, trying its profiles in catalog order."""
        attempt = Attempt(rid_for) if self.trace and self.trace.model == model.name else None
        for profile in model.profiles:
            if self._unservable(model, profile):
                continue
            need = self._need(model, profile)
            choice = choose(self.fleet, need)
            if attempt is not None:
                picked = [n.name for n in choice.nodes] if choice else []
                attempt.profiles.append((profile.name, verdicts(self.fleet, need), picked))
            if choice is not None:
                if attempt is not None and self.trace is not None:
                    self.trace.attempts.append(attempt)
                return self._allocate(self._new_id(model.name), model, profile, choice), []
        if attempt is not None and self.trace is not None:
            self.trace.attempts.append(attempt)
        found: list[schema.Rejection] = []
        for profile in model.profiles:
            unservable = self._unservable(model, profile)
            found.extend(schema.Rejection(profile=profile.name, node=None, fabric=None,
                                          reason=f"not servable: {reason}") for reason in unservable)
            if unservable:
                continue
            for v in rejections(self.fleet, self._need(model, profile)):
                assert v.reason is not None
                held = self.foreign_held.get(v.node or "")
                found.append(schema.Rejection(profile=profile.name, node=v.node, fabric=v.fabric, reason=v.reason + (
                    f" (held by another state's units: {'; '.join(held)})" if held else "")))
        return None, found

    def _unservable(self, model: Model, profile: Profile) -> Sequence[str]:
        """Why llama-server cannot load this model's GGUF (llama.cpp profiles), or why a whole
        repository cannot be served yet (any engine: not pinned to a commit)."""
        reasons = self.inputs.unservable.get(model.source, ())
        return reasons if profile.engine == "llamacpp" or is_repo_source(model.source) else ()

    def _kept(self, r: Replica) -> schema.PlannedReplica:
        shards = [schema.PlannedShard.placed(node=s.node, rank=s.rank, gpus=list(s.gpus), port=s.port, unit=s.unit,
                                             address=self.fleet.by_name[s.node].host.mgmt_address
                                             if s.node in self.fleet.by_name else "")
                  for s in sorted(r.shards, key=lambda s: s.rank)]
        fabric = None
        if len(shards) > 1:
            views = [self.fleet.by_name.get(s.node) for s in shards]
            common = set.intersection(*(set(v.fabrics) if v else set() for v in views))
            fabric = min(common) if common else None
        return schema.PlannedReplica.kept(id=r.id, model=r.model, profile=r.profile, engine=r.engine, shards=shards,
                                          endpoint=r.endpoint, spec_hash=r.spec_hash, fabric=fabric)

    def _unplaced(self, model: Model) -> schema.Unplaced:
        entry = self.unplaced.get(model.name)
        if entry is None:
            entry = schema.Unplaced(model=model.name, wanted=0, placed=0)
            self.unplaced[model.name] = entry
        return entry

    def _reject(self, model: Model, found: list[schema.Rejection], not_moved: schema.NotMoved | None = None) -> None:
        entry = self._unplaced(model)
        update: dict[str, object] = {}
        if found and not entry.rejections:
            update["rejections"] = found
        if not_moved is not None:
            update["not_moved"] = [*entry.not_moved, not_moved]
        self.unplaced[model.name] = entry.model_copy(update=update)

    def run(self) -> schema.Plan:
        kept, replacing = self._classify()
        self._strays()
        failed: set[str] = set()
        live: dict[str, int] = {}
        # Scale down first: no point moving a replica that is about to be destroyed.
        for model in self.catalog:
            ks = sorted(kept.get(model.name, []), key=lambda r: replica_sort_key(r.id, r.model))
            rs = sorted(replacing.get(model.name, []), key=lambda x: replica_sort_key(x.old.id, x.old.model))
            over = len(ks) + len(rs) - model.scaling.maximum
            while over > 0 and rs:
                x = rs.pop()
                self._destroy(x.old, "scaling_max", f"scaling.max is {model.scaling.maximum}")
                over -= 1
            if over > 0:
                # Replicas on cordoned nodes go first (the operator wants those nodes emptied),
                # then the newest.
                def cordoned(r: Replica) -> bool:
                    return any(self.fleet.by_name[s.node].host.node_state == "cordoned"
                               for s in r.shards if s.node in self.fleet.by_name)

                def newest_first(r: Replica) -> tuple[bool, int, str]:
                    return (not cordoned(r), -replica_sort_key(r.id, r.model)[1], r.id)

                victims = sorted(ks, key=newest_first)[:over]
                for r in sorted(victims, key=lambda r: replica_sort_key(r.id, r.model)):
                    self._destroy(r, "scaling_max", f"scaling.max is {model.scaling.maximum}")
                ks = [r for r in ks if r not in victims]
            kept[model.name], replacing[model.name] = ks, rs
            live[model.name] = len(ks) + len(rs)
            self.target[model.name] = max(model.scaling.min, live[model.name])
            self.desired.extend(self._kept(r) for r in ks)
        # Replacements before new replicas: they carry traffic today.
        todo = sorted((x for xs in replacing.values() for x in xs),
                      key=lambda x: replica_sort_key(x.old.id, x.old.model))
        for x in todo:
            model = self.catalog.models[x.old.model]
            found: list[schema.Rejection] = []
            if model.name in failed:
                new = None
            else:
                new, found = self._place(model, f"replacement of {x.old.id}")
            if new is not None:
                self.desired.append(new)
                self.actions.append(schema.Action(action="replace", replica=new.id, model=model.name, code=x.code,
                                           reason=x.reason, replaces=x.old.id, unreached=x.unreached))
                continue
            failed.add(model.name)
            now = self.inputs.now
            if x.destroy_if_unplaced:
                self._destroy(x.old, "no_replacement", f"{x.reason}; no node can take a replacement")
                live[model.name] -= 1
                self._reject(model, found, schema.NotMoved(replica=x.old.id, code=x.code,
                                                    reason=f"{x.reason}; destroyed, since nothing runs there"))
            elif x.deadline is not None and now is not None and now >= x.deadline:
                live[model.name] -= 1
                self._destroy(x.old, "drain_deadline", f"{x.reason} and its drain deadline {format_time(x.deadline)} "
                              f"has passed; no node can take a replacement: {_floor(model, live[model.name])}")
                self._reject(model, found, schema.NotMoved(
                    replica=x.old.id, code=x.code,
                    reason=f"{x.reason}; destroyed: its drain deadline {format_time(x.deadline)} has passed"))
            else:
                self.desired.append(self._kept(x.old))
                self._reject(model, found, schema.NotMoved(replica=x.old.id, code=x.code,
                                                    reason=f"{x.reason}; {_stays(x)}"))
        self._place_new(live, failed)
        plan = self._finish()
        self.fleet.release()
        return plan

    def _place_new(self, live: dict[str, int], failed: set[str]) -> None:
        """New replicas in rounds (every model's first, then every model's second...), biggest first.

        Rounds keep one model with a large `min` from taking the fleet before the others
        have one replica each; biggest first keeps whole nodes for multi-node replicas.
        """
        def size(m: Model) -> int:
            p = m.profiles[0]
            return p.nodes * max(p.gpus, 0)

        order = sorted(self.catalog, key=lambda m: (-size(m), m.name))
        missing = {m.name: max(0, m.scaling.min - live[m.name]) for m in order}
        start = dict(live)
        rnd = 0
        while True:
            todo = [m for m in order if missing[m.name] > rnd and m.name not in failed]
            if not todo:
                break
            for model in todo:
                new, found = self._place(model, f"replica {start[model.name] + rnd + 1} of {model.scaling.min}")
                if new is None:
                    failed.add(model.name)
                    self._reject(model, found)
                    continue
                self.desired.append(new)
                have = start[model.name]
                reason = (f"scaling.min is {model.scaling.min} and "
                          + ("none runs" if have == 0 else f"{have} run" + ("s" if have == 1 else "")))
                self.actions.append(schema.Action(action="create", replica=new.id, model=model.name, code="scaling_min",
                                           reason=reason))
                live[model.name] += 1
            rnd += 1

    def _finish(self) -> schema.Plan:
        records = sorted([*(_record(m) for m in self.catalog), *map(route_record, self.catalog.routes.values())],
                         key=lambda r: r.name)
        old = {m.name: m for m in self.state.models}
        touched = {a.model for a in self.actions}
        updates = []
        for rec in records:
            prev = old.get(rec.name)
            if prev is None and rec.name not in touched:
                updates.append(schema.Action(action="update", replica=None, model=rec.name, code="model_new",
                                      reason="new in the catalog; the routers learn of it"
                                             + (f" (a route: split {split_text(rec.route)})" if rec.route else "")))
            elif prev is not None and prev != rec and rec.name not in touched:
                updates.append(schema.Action(action="update", replica=None, model=rec.name, code="model_changed",
                                      reason=_record_change(prev, rec)))
        names = {r.name for r in records}
        for name in sorted(set(old) - names - touched):
            updates.append(schema.Action(action="update", replica=None, model=name, code="model_gone",
                                  reason="no longer in the catalog; the routers forget it"))

        def natural(a: schema.Action) -> tuple[str, int, str]:
            return replica_sort_key(a.replica or "", a.model)

        rank = {"create": 0, "replace": 0, "update": 1, "destroy": 2}
        actions = sorted([*self.actions, *updates], key=lambda a: (rank[a.action], *natural(a)))
        desired = sorted(self.desired, key=lambda r: replica_sort_key(r.id, r.model))
        placed: dict[str, int] = {}
        for r in desired:
            placed[r.model] = placed.get(r.model, 0) + 1
        unplaced = []
        for name, entry in sorted(self.unplaced.items()):
            unplaced.append(entry.model_copy(update={"wanted": self.target[name], "placed": placed.get(name, 0),
                                                     "not_moved": sorted(entry.not_moved, key=lambda n: n.replica)}))
        on_demand = [schema.OnDemand(model=m.name, max=m.scaling.maximum, idle_timeout=m.scaling.idle_timeout,
                              running=placed.get(m.name, 0)) for m in self.catalog if m.scaling.min == 0]
        summary = schema.Summary(
            add=sum(a.action in ("create", "replace") for a in actions),
            change=sum(a.action == "update" for a in actions),
            destroy=sum(a.action in ("destroy", "replace") for a in actions))
        if self.trace is not None:
            # Unreachable nodes are not planned with their last facts: they take nothing.
            self.trace.stale = {n.name for n in self.fleet.nodes
                                if n.facts is not None and n.facts.stale and n.name not in self.liveness}
            for m in self.catalog:
                if m.name == self.trace.model:
                    self.trace.final_verdicts = {p.name: verdicts(self.fleet, self._need(m, p)) for p in m.profiles}
        return schema.Plan(state_serial=self.state.serial, state_lineage=self.state.lineage, summary=summary,
                    actions=actions, desired=schema.Desired.placed(desired, records), unplaced=unplaced,
                    on_demand=on_demand,
                    notes=[*self._notes(), *self._floor_notes(placed), *self._above_min_notes(old, placed)])

    def _floor_notes(self, placed: dict[str, int]) -> list[str]:
        """Models this plan takes below `scaling.min` ready replicas: capacity cannot keep the floor.

        Apply brings each replacement up before its predecessor goes, so a move alone never
        drops a model below its floor; only what cannot be replaced anywhere does.
        """
        ready: dict[str, int] = {}  # counted once: a scan of the state per model was quadratic
        for r in self.state.replicas:
            if r.state == "ready":
                ready[r.model] = ready.get(r.model, 0) + 1
        notes = []
        for m in self.catalog:
            ready_now, after = ready.get(m.name, 0), placed.get(m.name, 0)
            if after < m.scaling.min and after < ready_now:
                notes.append(f"{m.name}: capacity cannot keep the floor: {ready_now} ready replicas now, {after} after "
                             f"this apply, scaling.min {m.scaling.min} (see the models that cannot be placed)")
        return notes

    def _above_min_notes(self, old: dict[str, ModelRecord], placed: dict[str, int]) -> list[str]:
        """Models the plan keeps above `scaling.min`, when it may surprise: min was just
        lowered, or nothing will ever stop them (min above 0 and no target_in_flight).

        The plan destroys only what runs above max: replicas between min and max may be ones
        demand started, which only the controller stops (on load or idleness), if anything does."""
        notes = []
        for m in self.catalog:
            prev, s, n = old.get(m.name), m.scaling, placed.get(m.name, 0)
            lowered = prev is not None and prev.scaling.min > s.min
            if n <= s.min or not (lowered or (s.min > 0 and not s.target_in_flight)):
                continue
            shrink = (f"`llmgw scale {m.name} --min {s.min} --max {s.min}` makes the next plan destroy those "
                      f"above {s.min}")
            if s.min == 0:
                how = (f"the controller (run with --demand-listen) stops them after "
                       f"{format_duration(s.idle_timeout)} without a request")
            elif s.target_in_flight:
                how = f"the controller (run with --demand-listen) removes them as the load falls, or {shrink}"
            else:
                how = f"nothing else stops them (no target_in_flight); {shrink}"
            since = f" (lowered from {prev.scaling.min})" if lowered and prev is not None else ""
            notes.append(f"{m.name}: {n} replicas stay, above scaling.min {s.min}{since}: the plan stops replicas "
                         f"only above max ({s.maximum}); {how}")
        return notes

    def _notes(self) -> list[str]:
        notes = []
        for n in self.fleet.nodes:
            f = n.facts
            lv = self.liveness.get(n.name)
            if lv is not None and lv.condition == "lost":
                notes.append(f"{lv.sentence(n.name)}: its replicas are replaced elsewhere and dropped from the "
                             "state without contacting it; nothing new goes there")
            elif lv is not None:
                notes.append(f"{lv.sentence(n.name)}: nothing new goes there; its replicas stay until then, when "
                             "plans replace them elsewhere")
            elif f is None:
                notes.append(f"{n.name}: no facts gathered yet; only profiles without GPUs can go there "
                             "(run `llmgw facts`)")
            elif f.stale_since is not None:
                why = f" ({f.stale_reason})" if f.stale_reason else ""
                notes.append(f"{n.name}: facts are stale since {f.stale_since.isoformat()}{why}; "
                             "planned with its last good facts")
        return notes + self.foreign


def _floor(model: Model, left: int) -> str:
    """How far below `scaling.min` destroying a replica takes its model (`left`: what remains)."""
    floor = model.scaling.min
    if left >= floor:
        return f"{model.name} keeps {left} replica{'s' if left != 1 else ''}, scaling.min {floor}"
    return (f"{model.name} falls to {left} of scaling.min {floor} replica{'s' if floor != 1 else ''}, "
            f"{floor - left} below min")


def _stays(x: _Replacing) -> str:
    """Until when a replica that nothing can take stays on its draining node."""
    if not x.draining:
        return "it stays until a replacement fits"
    if x.deadline is None:
        return (f"it stays until a replacement fits; the drain has no deadline (`llmgw drain {x.draining[0]} "
                f"--deadline {DEFAULT_DRAIN_DEADLINE}` sets one; the first plan after it destroys the replica)")
    return (f"it stays until a replacement fits, at most until the drain deadline {format_time(x.deadline)}; "
            "the first plan after it destroys the replica")


def make_plan(inputs: PlanInputs) -> schema.Plan:
    """The plan for `inputs`: pure, deterministic, every list in a stable order."""
    with collector.paused():
        return _Planner(inputs, None).run()


def traced_plan(inputs: PlanInputs, model: str) -> tuple[schema.Plan, Trace]:
    """The same plan, recording every placement attempt of `model` for `llmgw explain`."""
    if model not in inputs.catalog.models:
        raise PlanError(f"{model} is not a model in the catalog")
    planner = _Planner(inputs, model)
    with collector.paused():
        plan = planner.run()
    assert planner.trace is not None
    return plan, planner.trace
