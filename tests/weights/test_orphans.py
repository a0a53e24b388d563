"""Orphans computed exactly from the catalog's sources, on the example site's recorded facts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.records import Weights
from llmgw.state import Replica, Shard, State, write_state
from llmgw.weights.names import cache_name
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
OLD = "hf://org/retired/retired.gguf"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    site = tmp_path / "example"
    shutil.copytree(REPO / "inventories" / "example", site)
    facts = read_facts(site / "facts")
    host = facts["gpu-node-02"]
    extra = [Weights(path=f"/var/cache/llmgw/{cache_name(OLD)}", size_bytes=1234, cache=True,
                     cache_name=cache_name(OLD)),
             Weights(path="/var/cache/llmgw/operator-copy.gguf", size_bytes=99, cache=False)]
    write_facts(site / "facts", host.model_copy(update={"weights": [*(host.weights or []), *extra]}))
    return site


def orphans(site: Path) -> dict[str, object]:
    r = run_cli("-C", str(site), "weights", "orphans", "--json")
    assert r.exit_code == 0, r.stderr
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_lists_exactly_the_unwanted_cache_entry(example: Path) -> None:
    assert orphans(example) == {
        "orphans": [{"host": "gpu-node-02", "name": cache_name(OLD), "path": f"/var/cache/llmgw/{cache_name(OLD)}",
                     "size_bytes": 1234}],
        "total_bytes": 1234, "kept_for_state": []}
    text = run_cli("-C", str(example), "weights", "orphans")
    assert "1 orphaned entry on 1 host" in text.stdout and "--collect" in text.stdout


def test_weights_of_a_recorded_replica_are_not_orphans(example: Path) -> None:
    state = State(lineage="t", replicas=[Replica(
        id="retired-1", model="retired", profile="cpu", engine="llamacpp", state="ready",
        endpoint="http://gpu-node-02:20000", cache_name=cache_name(OLD),
        shards=[Shard(node="gpu-node-02", rank=0, port=20000, unit="llmgw-retired-1-0.service")])])
    write_state(example / "state.json", state)
    assert orphans(example) == {"orphans": [], "total_bytes": 0, "kept_for_state": [
        {"host": "gpu-node-02", "name": cache_name(OLD), "path": f"/var/cache/llmgw/{cache_name(OLD)}",
         "replicas": ["retired-1"]}]}


def test_removing_a_model_makes_its_entries_orphans(example: Path) -> None:
    before = {o["name"] for o in orphans(example)["orphans"]}  # type: ignore[attr-defined]
    r = run_cli("-C", str(example), "models", "--json")
    models = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    cached = {w.cache_name: h for h, f in read_facts(example / "facts").items() for w in f.weights or []
              if w.cache_name}
    victim = next(n for n, m in sorted(models.items())
                  if cache_name(m["source"]) in cached and not any(
                      cache_name(o["source"]) == cache_name(m["source"]) for k, o in models.items() if k != n)
                  and not any(o.get("fallbacks") and n in o["fallbacks"] for o in models.values()))
    removed = run_cli("-C", str(example), "model", "remove", victim)
    assert removed.exit_code == 0, removed.stderr
    after = {o["name"] for o in orphans(example)["orphans"]}  # type: ignore[attr-defined]
    assert after == before | {cache_name(models[victim]["source"])}


def test_entries_of_a_repository_not_pinned_yet_are_spared() -> None:
    """Without a `catalog validate` record the commit, hence the cache name, is not known here:
    every entry named after the repository is kept rather than guessed away."""
    from llmgw.weights.orphans import Orphan, spare_unpinned

    mine = Orphan("n1", "0123456789abcdef-Big-Model", "/var/cache/llmgw/0123456789abcdef-Big-Model", 10)
    other = Orphan("n1", "fedcba9876543210-old.gguf", "/var/cache/llmgw/fedcba9876543210-old.gguf", 5)
    assert spare_unpinned({"n1": [mine, other]}, ["hf://org/Big-Model"]) == {"n1": [other]}
    assert spare_unpinned({"n1": [mine]}, ["hf://org/Big-Model@main"]) == {}


def test_adapter_weights_a_recorded_replica_loaded_are_not_orphans(example: Path) -> None:
    """A LoRA adapter removed from the catalog keeps its weights while a replica that loaded it runs."""
    from llmgw.state import LoadedAdapter

    state = State(lineage="t", replicas=[Replica(
        id="coder-1", model="coder", profile="cpu", engine="llamacpp", state="ready",
        endpoint="http://gpu-node-02:20000", adapters=[LoadedAdapter(name="coder-sql", cache_name=cache_name(OLD))],
        shards=[Shard(node="gpu-node-02", rank=0, port=20000, unit="llmgw-coder-1-0.service")])])
    write_state(example / "state.json", state)
    assert orphans(example)["orphans"] == []
    assert orphans(example)["kept_for_state"] == [
        {"host": "gpu-node-02", "name": cache_name(OLD), "path": f"/var/cache/llmgw/{cache_name(OLD)}",
         "replicas": ["coder-1"]}]
