"""Fetch once per shared cache, through apply's own path (wiring.hosts_for -> Hosts.engines ->
apply.yml): two hosts whose cache folder is declared shared (llmgw_shared_dirs) — here two
inventory names for this machine, so they truly share it — and only one of them fetches."""

from __future__ import annotations

import sys
from pathlib import Path

from llmgw.apply.wiring import hosts_for
from llmgw.site import Site
from llmgw.weights.names import cache_name


def test_a_declared_shared_cache_is_fetched_by_one_host(tmp_path: Path) -> None:
    shared, models = tmp_path / "shared", tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(b"GGUF" + b"\0" * 100_000)
    site = tmp_path / "site"
    site.mkdir()
    (site / "llmgw.yaml").write_text("inventory: hosts.yml\n")
    node = (f"{{ansible_connection: local, ansible_python_interpreter: {sys.executable}, "
            f"llmgw_mgmt_address: 127.0.0.1, llmgw_cache_dir: {shared}/cache, llmgw_shared_dirs: [{shared}], "
            f"llmgw_model_dirs: [{models}], llmgw_weights_group: root}}")
    (site / "hosts.yml").write_text(f"all:\n  children:\n    llmgw_nodes:\n      hosts:\n"
                                    f"        a: {node}\n        b: {node}\n")
    source = f"file://{models}/m.gguf"
    entry = {"source": source, "name": cache_name(source)}
    fetched_on: set[str] = set()
    hosts_for(Site.load(site)).engines({"b": [entry], "a": [entry]}, {}, "start",
                                       lambda step, host, done, total: step == "weights" and fetched_on.add(host))
    assert fetched_on == {"a"}
    assert (shared / "cache" / entry["name"]).read_bytes() == (models / "m.gguf").read_bytes()
