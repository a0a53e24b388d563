"""Weights where they are, on the host side: what node_facts reports of an operator's copies, the
`weights` module serving one in place (nothing fetched, nothing written), GC leaving it alone,
and the llmgw_weights role through apply's own path (llmgw.apply.hosts -> playbooks/apply.yml)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from llmgw.apply import Applier
from llmgw.apply.hosts import Hosts, Progress
from llmgw.facts.records import HostFacts, Weights
from llmgw.inventory import load_inventory
from llmgw.planner.fleet import Fleet
from llmgw.weights.names import cache_name
from llmgw.weights.orphans import find_orphans
from tests.planner.test_placement_weights import GGUF, l40s
from tests.support.facts import util
from tests.support.plan_inputs import T0, facts, gpu_profile, host, inputs, model

REPO = Path(__file__).resolve().parents[2]
weight_files = util("weight_files")
cache_names = util("cache_names")
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.llmgw.cluster.plugins.modules import weights as mod  # noqa: E402

COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"


def hf_cache_snapshot(top: Path) -> Path:
    """The layout huggingface_hub leaves: blobs by hash, a snapshot of links to them, refs."""
    repo = top / "models--Qwen--Qwen2.5-0.5B"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name, data in (("config.json", b"{}" * 10), ("model.safetensors", b"w" * 3000), ("tokenizer.json", b"t" * 7)):
        blob = repo / "blobs" / f"{len(data):040x}"
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return snap


def test_facts_find_a_hugging_face_cache_snapshot_with_its_files(tmp_path: Path) -> None:
    models = tmp_path / "models"
    snap = hf_cache_snapshot(models / "hub")
    found = weight_files.find_weights([str(models)], str(tmp_path / "cache"), cache_names.is_cache_name)
    assert found == [{"path": str(snap), "size_bytes": 3027, "cache": False, "cache_name": None,
                      "files": {"config.json": 20, "model.safetensors": 3000, "tokenizer.json": 7}}]
    # ... and the planner serves the pinned repository from it, checked against the pin's file list.
    source = f"hf://Qwen/Qwen2.5-0.5B@{COMMIT}"
    record = HostFacts(host="a", gathered_at=T0, weights=[Weights.model_validate(w) for w in found])
    inp = inputs([model("q", gpu_profile(gpus=1), source=source)], [host("a", model_dirs=[str(models)])],
                 [facts("a", 8).model_copy(update={"weights": record.weights})])
    fleet = Fleet(inp.nodes, inp.facts, inp.fabrics, inp.ports, {source: 3020},
                  {source: {"config.json": 20, "model.safetensors": 3000}})
    assert fleet.copy_at(fleet.nodes[0], source, cache_name(source)) == str(snap)


def test_module_serves_a_copy_in_place_and_writes_nothing(tmp_path: Path) -> None:
    cache, models = tmp_path / "cache", tmp_path / "models"
    cache.mkdir()
    gguf = models / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"m" * 100)
    before = gguf.stat()
    assert mod.check_present(str(gguf), [str(models)], str(cache)) == str(gguf)
    assert list(cache.iterdir()) == [] and gguf.stat().st_mtime_ns == before.st_mtime_ns
    refusals = {
        "outside": (str(tmp_path / "elsewhere.gguf"), "must lie under the host's llmgw_model_dirs"),
        "missing": (str(models / "gone.gguf"), "is not on this host (any more)"),
    }
    (tmp_path / "elsewhere.gguf").write_bytes(b"x")
    for path, why in refusals.values():
        with pytest.raises(mod.FetchError) as exc:
            mod.check_present(path, [str(models)], str(cache))
        assert why in str(exc.value)
    # A link in a model dir pointing out of it is judged by where it leads.
    (models / "link.gguf").symlink_to(tmp_path / "elsewhere.gguf")
    with pytest.raises(mod.FetchError, match="must lie under"):
        mod.check_present(str(models / "link.gguf"), [str(models)], str(cache))
    with pytest.raises(mod.FetchError, match="inside llmgw's cache"):
        mod.check_present(str(cache / "x.gguf"), [str(tmp_path)], str(cache))


def test_the_module_through_ansible_reports_no_fetch(tmp_path: Path) -> None:
    cache, models = tmp_path / "cache", tmp_path / "models"
    gguf = models / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"m" * 100)
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "True",
           "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}
    args = json.dumps({"cache_dir": str(cache), "source": "hf://o/r/m.gguf", "present_at": str(gguf),
                       "model_dirs": [str(models)]})
    out = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "llmgw.cluster.weights",
                          "-a", args], env=env, capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert (result["changed"], result["fetched"], result["path"], result["size_bytes"]) == \
        (False, False, str(gguf), 100)
    assert not cache.exists()  # not even the cache folder was made


def test_gc_never_lists_an_operators_copy() -> None:
    snap = Weights(path=f"/srv/models/hub/models--Qwen--Qwen2.5-0.5B/snapshots/{COMMIT}", size_bytes=10,
                   cache=False, files={"config.json": 10})
    gguf = Weights(path="/srv/models/m.gguf", size_bytes=10, cache=False)
    orphan = Weights(path="/var/cache/llmgw/x", size_bytes=5, cache=True, cache_name=cache_name("hf://o/r/gone.gguf"))
    found = find_orphans({"a": facts("a", 8, weights=[snap, gguf, orphan])}, wanted=set())
    assert [(o.host, o.path) for o in found["a"]] == [("a", "/var/cache/llmgw/x")]


def test_the_role_checks_a_copy_in_place_and_fetches_only_the_rest(tmp_path: Path) -> None:
    """apply's own path: one entry served in place (present_at), one file:// entry fetched."""
    cache, models = tmp_path / "cache", tmp_path / "models"
    models.mkdir()
    mine = models / "served.gguf"
    mine.write_bytes(b"s" * 64)
    other = models / "copied.gguf"
    other.write_bytes(b"c" * 32)
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"""
all:
  children:
    llmgw_nodes:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: {sys.executable}
          llmgw_mgmt_address: 127.0.0.1
          llmgw_weights_cache_dir: {cache}
          llmgw_weights_group: root
          llmgw_model_dirs: [{models}]
""")
    served, copied = "hf://o/r/served.gguf", f"file://{other}"
    hosts = Hosts(inv, load_inventory(inv), artifacts=None, forks=2, extra={"llmgw_weights_poll": 1})
    seen: list[tuple[str, str, int, int | None]] = []
    hosts.engines({"localhost": [{"source": served, "name": cache_name(served), "present_at": str(mine)},
                                 {"source": copied, "name": cache_name(copied)}]}, {}, "start",
                  lambda step, host, done, total: seen.append((step, host, done, total)))
    # Only the file:// source came into the cache (with its download's lock); nothing for the copy
    # served in place, not even a progress or lock file, and the operator's folder is as it was.
    assert sorted(p.name for p in cache.iterdir()) == [f".{cache_name(copied)}.lock", cache_name(copied)]
    assert sorted(p.name for p in models.iterdir()) == ["copied.gguf", "served.gguf"]
    assert mine.read_bytes() == b"s" * 64
    assert all(total != 64 for _step, _host, _done, total in seen), seen


class _Recorder(Hosts):
    """The hosts as apply sees them, recording what it asks (the role's run is tested above)."""

    def __init__(self, inventory: Path) -> None:
        super().__init__(inventory, load_inventory(inventory), artifacts=None)
        self.asked: list[tuple[dict[str, list[dict[str, str]]], dict[str, list[dict[str, Any]]]]] = []

    @property
    def routers(self) -> list[str]:
        return []

    def engines(self, weights: Mapping[str, list[dict[str, str]]], shards: Mapping[str, list[dict[str, Any]]],
                step: str, progress: Progress | None) -> None:
        self.asked.append(({h: list(es) for h, es in weights.items()}, {h: list(es) for h, es in shards.items()}))


def test_apply_gives_the_engine_the_copy_and_the_role_nothing_to_fetch(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("""
all:
  children:
    llmgw_nodes:
      hosts:
        l40s-01: {llmgw_model_dirs: [/srv/models]}
        l40s-02: {llmgw_model_dirs: [/srv/models]}
""")
    plan, _ = l40s("/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf")
    hosts = _Recorder(inv)
    Applier(plan=plan, state_file=tmp_path / "state.json", inventory=hosts.inventory, hosts=hosts,
            wheelhouse=lambda: Path("/nonexistent")).run()
    ((weights, shards),) = hosts.asked
    assert weights == {"l40s-02": [{"source": GGUF, "name": cache_name(GGUF),
                                    "present_at": "/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf"}]}
    assert [e["model_path"] for e in shards["l40s-02"]] == ["/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf"]
