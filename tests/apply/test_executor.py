"""The Applier's order and its record, on the example site's recorded fleet.

The hosts are replaced by a recorder (the real playbooks run in tests/e2e on the lab):
every call notes the state on disk at that moment, so these tests pin what a kill at
any point would leave behind, and that the next plan finishes it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from llmgw.apply import Applier, check_fresh
from llmgw.apply.hosts import Hosts, Progress, RouterView
from llmgw.errors import PlanError
from llmgw.inventory import load_inventory
from llmgw.planner import Plan, make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from llmgw.state import State, read_state, write_state
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]


class Killed(Exception):
    """Stands for a kill -9: the Applier stops where it is."""


class Recorder(Hosts):
    def __init__(self, site: Site, kill_at: str | None = None) -> None:
        super().__init__(site.inventory, load_inventory(site.inventory), artifacts=None)
        self.site = site
        self.calls: list[tuple[str, dict[str, list[str]], list[tuple[str, str]]]] = []
        self.kill_at = kill_at

    @property
    def routers(self) -> list[str]:
        return ["router-1"]

    def _note(self, what: str, detail: dict[str, list[str]]) -> None:
        state = read_state(self.site.state_file)
        self.calls.append((what, detail, [(r.id, r.state) for r in state.replicas]))
        if what == self.kill_at:
            raise Killed(what)

    def engines(self, weights: Mapping[str, list[dict[str, str]]], shards: Mapping[str, list[dict[str, Any]]],
                step: str, progress: Progress | None) -> None:
        self._note(step, {h: [f"{e['unit']}:{e['state']}" for e in es] for h, es in shards.items()})

    def deliver(self, state_file: Path, wheelhouse: Path, *, serial: int, present: Sequence[str] = (),
                idle: Sequence[str] = (), timeout: float = 60.0, state_only: bool = False,
                progress: Progress | None = None) -> list[RouterView]:
        self._note("deliver", {"present": list(present), "idle": list(idle)})
        state = read_state(state_file)
        return [RouterView("router-1", True, serial, {r.id: 0 for r in state.replicas})]

    def drain(self, state_file: Path, wheelhouse: Path, *, serial: int, idle: Sequence[str], timeout: float,
              stop: Mapping[str, list[dict[str, Any]]], state_only: bool = False,
              progress: Progress | None = None) -> list[RouterView]:
        # One Ansible run in Hosts: the delivery, then the stop (only once the routers hold the state).
        views = self.deliver(state_file, wheelhouse, serial=serial, idle=idle, timeout=timeout,
                             state_only=state_only, progress=progress)
        self.engines({}, stop, "stop", progress)
        return views


@pytest.fixture
def site(tmp_path: Path) -> Site:
    shutil.copytree(REPO / "inventories" / "example", tmp_path / "site",
                    ignore=shutil.ignore_patterns("state.json*"))
    return Site.load(tmp_path / "site")


def plan_of(site: Site) -> Plan:
    return make_plan(load_inputs(site))


def applier(site: Site, hosts: Recorder, plan: Plan | None = None) -> Applier:
    return Applier(plan=plan or plan_of(site), state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
                   wheelhouse=lambda: Path("/nonexistent/wheelhouse.tar"), grace=1.0)


def test_new_replicas_are_recorded_starting_before_any_host_is_touched(site: Site) -> None:
    plan = plan_of(site)
    created = sorted(a.replica or "" for a in plan.actions if a.action == "create")
    assert created
    hosts = Recorder(site)
    outcome = applier(site, hosts, plan).run()
    first, *rest = hosts.calls
    assert first[0] == "start" and sorted(i for i, s in first[2]) == created
    assert {s for _i, s in first[2]} == {"starting"}
    assert rest[0][0] == "deliver" and {s for _i, s in rest[0][2]} == {"ready"}
    assert sorted(outcome.created) == created
    state = read_state(site.state_file)
    assert sorted(r.id for r in state.replicas) == created and all(r.created_at for r in state.replicas)
    # Each record names its weights' cache entry, so weights GC never takes them.
    wanted = {r.id: r.cache_name for r in plan.desired.replicas}
    assert all(r.cache_name and r.cache_name == wanted[r.id] for r in state.replicas)
    assert state.models == plan.desired.models
    # Nothing left to do, and the next apply has nothing to run.
    assert not plan_of(site).has_changes


def test_a_kill_during_the_shard_step_is_finished_by_the_next_plan(site: Site) -> None:
    with pytest.raises(Killed):
        applier(site, Recorder(site, kill_at="start")).run()
    killed = read_state(site.state_file)
    assert killed.replicas and {r.state for r in killed.replicas} == {"starting"}
    plan = plan_of(site)
    destroys = {a.replica for a in plan.actions if a.action == "destroy"}
    assert destroys == {r.id for r in killed.replicas}
    assert all("being started" in a.reason for a in plan.actions if a.action == "destroy")
    hosts = Recorder(site)
    applier(site, hosts, plan).run()
    stops = [c for c in hosts.calls if c[0] == "stop"]
    stopped = {u.split(":")[0] for c in stops for us in c[1].values() for u in us}
    assert stopped == {s.unit.removesuffix(".service") for r in killed.replicas for s in r.shards}
    final = read_state(site.state_file)
    assert {r.state for r in final.replicas} == {"ready"}
    assert not {r.id for r in final.replicas} & {r.id for r in killed.replicas}
    assert not plan_of(site).has_changes


def test_replaced_replicas_drain_only_after_their_replacement_serves(site: Site) -> None:
    applier(site, Recorder(site)).run()
    state = read_state(site.state_file)
    victim = state.replicas[0]
    node = victim.shards[0].node
    drained_cli = run_cli("-C", str(site.root), "drain", node)
    assert drained_cli.exit_code == 0, drained_cli.stderr
    plan = plan_of(Site.load(site.root))
    replaced = {a.replaces: a.replica for a in plan.actions if a.action == "replace"}
    assert victim.id in replaced
    hosts = Recorder(site)
    applier(site, hosts, plan).run()
    names = [c[0] for c in hosts.calls]
    new = replaced[victim.id]
    started = next(i for i, c in enumerate(hosts.calls) if c[0] == "start" and any(
        u.startswith(f"llmgw-{new}-") for us in c[1].values() for u in us))
    drained = next(i for i, c in enumerate(hosts.calls) if c[0] == "deliver" and victim.id in c[1]["idle"])
    stopped = next(i for i, c in enumerate(hosts.calls) if c[0] == "stop" and any(
        u.startswith(f"llmgw-{victim.id}-") for us in c[1].values() for u in us))
    assert started < drained < stopped, names
    assert dict(hosts.calls[drained][2])[victim.id] == "draining"
    assert dict(hosts.calls[drained][2])[new] == "ready"
    assert dict(hosts.calls[stopped][2])[victim.id] == "draining"  # recorded until its units are gone
    assert read_state(site.state_file).replica(victim.id) is None


def test_a_stale_or_foreign_plan_is_refused(site: Site) -> None:
    plan = plan_of(site)
    moved = write_state(site.state_file, State())
    with pytest.raises(PlanError, match="stale"):
        check_fresh(plan, moved)
    with pytest.raises(PlanError, match="stale"):
        applier(site, Recorder(site), plan).run()
    other = plan.model_copy(update={"state_serial": moved.serial, "state_lineage": "another-lineage"})
    with pytest.raises(PlanError, match="another state"):
        check_fresh(other, moved)


def test_multi_node_shards_get_their_fabric_adapters(site: Site) -> None:
    from llmgw.apply.wiring import fabric_hcas

    plan = plan_of(site)
    multi = [r for r in plan.desired.replicas if len(r.shards) > 1]
    assert multi, "the example catalog places a multi-node replica"
    entries: dict[str, list[dict[str, Any]]] = {}

    class Capture(Recorder):
        def engines(self, weights: Mapping[str, list[dict[str, str]]],
                    shards: Mapping[str, list[dict[str, Any]]], step: str, progress: Progress | None) -> None:
            for host, es in shards.items():
                entries.setdefault(host, []).extend(es)

    hosts = Capture(site)
    Applier(plan=plan, state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
            wheelhouse=lambda: Path("/nonexistent"), fabric_hcas=fabric_hcas(site)).run()
    r = multi[0]
    for s in r.shards:
        e = next(e for e in entries[s.node] if e["replica"] == r.id)
        assert e["rank"] == s.rank and e["nodes"] == len(r.shards) and e["leader"] == r.shards[0].address
        assert e["peers"] == [f"{x.address}:{x.port}" for x in r.shards]
        assert e["fabric"] == r.fabric and e["ib_hcas"] and all(h.startswith("mlx5_") for h in e["ib_hcas"])
        assert e["gpus"] == s.gpus


def test_adapters_are_fetched_beside_the_base_and_handed_to_the_engine(site: Site) -> None:
    """LoRA adapters take the base's weights path: one weights entry each on the replica's
    node (the same role: cache, progress, single-flight), the engine's entry names their
    cache paths in catalog order, and the state records what the engine loaded."""
    from datetime import UTC, datetime

    from llmgw.weights.names import cache_name
    from llmgw.weights.sources import SourceInfo, write_source

    sql = "hf://Qwen/qwen-sql-lora/qwen-sql-lora.gguf"
    # Its rank as `catalog validate` recorded it: the engine's entry carries it (vLLM sizes slots by it).
    write_source(site.facts_dir, SourceInfo(source=sql, cache_name=cache_name(sql), adapter_rank=12,
                                            inspected_at=datetime.now(UTC)))
    chat = site.catalog_dir / "chat.yaml"
    chat.write_text(chat.read_text().replace("    scaling: {min: 0, max: 2, idle_timeout: 15m}\n", (
        "    scaling: {min: 1, max: 2, idle_timeout: 15m}\n"
        "    adapters:\n"
        f"      - {{name: qwen-sql, source: '{sql}'}}\n")))
    plan = plan_of(site)
    r = next(r for r in plan.desired.replicas if r.model == "qwen2.5-7b")
    seen: dict[str, Any] = {}

    class Capture(Recorder):
        def engines(self, weights: Mapping[str, list[dict[str, str]]],
                    shards: Mapping[str, list[dict[str, Any]]], step: str, progress: Progress | None) -> None:
            seen["weights"], seen["shards"] = weights, shards

    hosts = Capture(site)
    applier(site, hosts, plan).run()
    node = r.shards[0].node
    assert {"source": sql, "name": cache_name(sql)} in seen["weights"][node]
    entry = next(e for e in seen["shards"][node] if e["replica"] == r.id)
    assert entry["adapters"] == [{"name": "qwen-sql", "path": entry["model_path"].rsplit("/", 1)[0] + "/"
                                  + cache_name(sql), "rank": 12}]
    record = next(x for x in read_state(site.state_file).replicas if x.id == r.id)
    assert [(a.name, a.cache_name) for a in record.adapters] == [("qwen-sql", cache_name(sql))]
    others = [e for es in seen["shards"].values() for e in es if e["replica"] != r.id]
    assert others and all(e["adapters"] == [] for e in others)


def test_adapters_loaded_at_run_time_are_fetched_and_recorded_with_their_path(site: Site) -> None:
    """adapter_loading: runtime: the weights are fetched as for adapters loaded at start, the
    engine's entry says max_loras (so it starts with none), and the state records the path the
    router's load call sends."""
    from llmgw.weights.names import cache_name

    sql = "hf://meta-llama/llama-sql-lora/adapter_model.safetensors"
    chat = site.catalog_dir / "chat.yaml"
    chat.write_text(chat.read_text().replace("    scaling: {min: 2, max: 4, idle_timeout: 1h}\n", (
        "    scaling: {min: 2, max: 4, idle_timeout: 1h}\n"
        "    adapter_loading: runtime\n"
        "    max_loras: 1\n"
        "    adapters:\n"
        f"      - {{name: llama-sql, source: '{sql}'}}\n")))
    plan = plan_of(site)
    r = next(r for r in plan.desired.replicas if r.model == "llama-3.1-70b")
    seen: dict[str, Any] = {}

    class Capture(Recorder):
        def engines(self, weights: Mapping[str, list[dict[str, str]]],
                    shards: Mapping[str, list[dict[str, Any]]], step: str, progress: Progress | None) -> None:
            seen.setdefault("weights", {}).update(weights)
            seen.setdefault("shards", {}).update(shards)

    applier(site, Capture(site), plan).run()
    node = r.shards[0].node
    assert {"source": sql, "name": cache_name(sql)} in seen["weights"][node]
    entry = next(e for e in seen["shards"][node] if e["replica"] == r.id)
    path = f"/var/cache/llmgw/{cache_name(sql)}"  # the node's weights cache (the base is an operator's copy)
    assert entry["max_loras"] == 1 and entry["adapters"] == [{"name": "llama-sql", "path": path}]
    record = next(x for x in read_state(site.state_file).replicas if x.id == r.id)
    assert [(a.name, a.path) for a in record.adapters] == [("llama-sql", path)]
    model = next(m for m in read_state(site.state_file).models if m.name == "llama-3.1-70b")
    assert model.max_loras == 1


@pytest.mark.parametrize("seqs", [None, 48])
def test_each_new_replica_records_what_its_engine_runs_at_once(site: Site, seqs: int | None) -> None:
    """The router's admission default for engines that do not say it themselves: vLLM's
    --max-num-seqs, else the pinned vLLM's default for the GPU the facts name (1024 on an
    H100, 256 on an A100, llmgw.engines.vllm); SGLang's only when the catalog sets it."""
    from llmgw.apply.wiring import gpu_device
    from llmgw.facts.cache import read_facts

    if seqs is not None:
        chat = site.catalog_dir / "chat.yaml"
        chat.write_text(chat.read_text().replace('args: ["--max-model-len", "32768"]',
                                                 f'args: ["--max-model-len", "32768", "--max-num-seqs={seqs}"]'))
    plan = plan_of(site)
    hosts = Recorder(site)
    Applier(plan=plan, state_file=site.state_file, inventory=hosts.inventory, hosts=hosts,
            wheelhouse=lambda: Path("/nonexistent"), gpu_device=gpu_device(site)).run()
    facts = read_facts(site.facts_dir)
    seen = set()
    for r in read_state(site.state_file).replicas:
        planned = next(p for p in plan.desired.replicas if p.id == r.id)
        first = planned.shards[0]
        gpu = next((g for g in facts[first.node].gpus or [] if first.gpus and g.index == first.gpus[0]), None)
        if r.engine == "vllm" and f"--max-num-seqs={seqs}" in (planned.args or []):
            want: int | None = seqs
        elif r.engine == "vllm":
            assert gpu is not None
            want = 256 if "A100" in gpu.name else 1024
        else:  # llama.cpp says its slots itself; SGLang's default is sized from its KV cache at start
            want = None
        assert r.max_running == want, (r.id, r.engine, gpu.name if gpu else None)
        seen.add((r.engine, want))
    assert {("vllm", seqs or 1024), ("llamacpp", None)} <= seen, seen
