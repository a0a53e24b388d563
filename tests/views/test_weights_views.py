"""What each fabric holds, and each node: `status`, `fabrics`, `nodes --json` and the dashboard's
fabric list on the example site, text and JSON pinned.

The example seeds qwen2.5-7b into one fabric only (gpu-node-03's cache) and llama-3.1-70b
into both (operator copies under /models, llmgw's cache on gpu-node-01/02): the first is
what `status` could not show before (#35)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.site import Site
from llmgw.views.planned import load_site_data
from llmgw.views.status import fabrics_list
from tests.support.cli import run_cli
from tests.support.example_site import example_site

H100, A100 = "ib-0c42a10300b20000", "ib-0c42a10300c70000"
LLAMA_COPY = "/models/meta-llama/Llama-3.1-70B-Instruct"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield example_site(tmp_path_factory.mktemp("held"))


def test_status_says_which_models_each_fabric_holds(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    r = run_cli("-C", str(site), "status", "--no-router")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    at = lines.index("Fabrics  (free whole nodes: ready, every GPU healthy and free)")
    assert lines[at + 2] == "    weights: llama-3.1-70b on 8 of 8 nodes, qwen2.5-7b on 1 of 8 nodes"
    assert lines[at + 4] == "    weights: llama-3.1-70b on 4 of 4 nodes"
    data = json.loads(run_cli("-C", str(site), "status", "--json", "--no-router").stdout)
    assert {f["fabric"]: f["weights"] for f in data["fabrics"]} == {
        H100: [{"model": "llama-3.1-70b", "nodes": 8}, {"model": "qwen2.5-7b", "nodes": 1}],
        A100: [{"model": "llama-3.1-70b", "nodes": 4}]}


def test_fabrics_text_json_and_the_dashboards_list(site: Path) -> None:
    r = run_cli("-C", str(site), "fabrics")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    at = lines.index("Weights present (catalog models, on how many of each fabric's hosts):")
    assert lines[at + 1:] == [f"  {H100}  llama-3.1-70b on 8 of 8 nodes, qwen2.5-7b on 1 of 8 nodes",
                              f"  {A100}  llama-3.1-70b on 4 of 4 nodes"]
    data = json.loads(run_cli("-C", str(site), "fabrics", "--json").stdout)
    assert {f["id"]: f["weights"] for f in data["fabrics"]} == {
        H100: [{"model": "llama-3.1-70b", "nodes": 8}, {"model": "qwen2.5-7b", "nodes": 1}],
        A100: [{"model": "llama-3.1-70b", "nodes": 4}]}
    listed = fabrics_list(load_site_data(Site.load(site)))
    assert {f["id"]: f["weights"] for f in listed} == {f["id"]: f["weights"] for f in data["fabrics"]}


def test_nodes_json_carries_each_nodes_weights_and_what_they_serve(site: Path) -> None:
    r = run_cli("-C", str(site), "nodes", "--json")
    assert r.exit_code == 0, r.stderr
    nodes = {n["node"]: n for n in json.loads(r.stdout)["nodes"]}
    assert nodes["gpu-node-03"]["weights"] == [
        {"path": "/models/gguf/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "size_bytes": 4920734016, "cache": False,
         "models": []},
        {"path": LLAMA_COPY, "size_bytes": 141107412992, "cache": False, "models": ["llama-3.1-70b"]},
        {"path": "/var/cache/llmgw/5335b8e6e173fa17-qwen2.5-7b-instruct-q4_k_m.gguf", "size_bytes": 4683073536,
         "cache": True, "models": ["qwen2.5-7b"]}]
    # Where llmgw's own entry is there too, the model is served from it (the cache is llmgw's to manage).
    assert [w["models"] for w in nodes["gpu-node-01"]["weights"]] == [[], [], ["llama-3.1-70b"]]
    assert nodes["cpu-01"]["weights"] == []  # reported: none
    assert nodes["new-01"]["weights"] is None  # no facts: not known
