"""`llmgw models inspect` against the olah mirror (files, format, dtype, size, who could hold it),
and `llmgw models search` parsing the Hub's search answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from llmgw.facts import Filesystem, HostFacts
from llmgw.facts.cache import write_facts
from llmgw.weights.browse import _gguf_quant
from tests.support.cli import run_cli
from tests.support.hf_mirror import HfMirror
from tests.support.recording_server import recording_server

HOSTS = """\
all:
  children:
    llmgw_nodes:
      hosts:
        roomy: {ansible_host: 127.0.0.1, llmgw_mgmt_address: 127.0.0.1}
        full: {ansible_host: 127.0.0.1, llmgw_mgmt_address: 127.0.0.1}
"""
CATALOG = """
models:
  - name: tiny-hf
    source: hf://llmgw/tiny-llama
    profiles:
      - {name: cpu, engine: vllm, gpus: 0, min_memory_gb: 1}
  - name: tiny-gguf
    source: https://models.example/t.gguf
    profiles:
      - {name: cpu, engine: llamacpp, min_memory_gb: 1}
"""


def _facts(site: Path, host: str, free: int) -> None:
    fs = Filesystem(mount="/", device="/dev/sda1", fstype="ext4", shared=False, free_bytes=free,
                    total_bytes=10**12, paths=["/var/cache/llmgw"])
    write_facts(site / "facts", HostFacts(host=host, gathered_at=datetime(2026, 12, 1, tzinfo=UTC), filesystems=[fs]))


def test_inspect_shows_the_variant_its_size_and_who_could_hold_it(hf_mirror: HfMirror,
                                                                  site: Callable[..., Path]) -> None:
    root = site(files={"catalog/m.yaml": CATALOG, "hosts.yml": HOSTS},
                config=f"mirror: {hf_mirror.url}\ninventory: hosts.yml\n")
    size = sum((hf_mirror.files / n).stat().st_size for n in hf_mirror.file_names())
    _facts(root, "roomy", 10**9)
    _facts(root, "full", size - 1)
    res = run_cli("-C", str(root), "models", "inspect", f"hf://{hf_mirror.repo}", "--json")
    assert res.exit_code == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["commit"] == hf_mirror.commit and set(doc["files"]) == set(hf_mirror.file_names())
    [variant] = doc["variants"]
    assert variant["format"] == "safetensors" and variant["name"] == "safetensors F32"
    assert variant["size_bytes"] == size and variant["files"] == ["model.safetensors"]
    assert variant["profiles"] == ["tiny-hf/cpu"] and variant["nodes"] == ["roomy"]
    table = run_cli("-C", str(root), "models", "inspect", f"hf://{hf_mirror.repo}@main")
    assert table.exit_code == 0 and f"commit {hf_mirror.commit}" in table.stdout


def test_inspect_refuses_what_is_not_a_repository(site: Callable[..., Path]) -> None:
    root = site(config="mirror: http://127.0.0.1:9\n")
    res = run_cli("-C", str(root), "models", "inspect", "hf://org/repo/file.gguf")
    assert res.exit_code == 1 and "is not a repository" in res.stderr


def test_search_lists_what_the_endpoint_answers(site: Callable[..., Path]) -> None:
    answer = json.dumps([{"id": "Qwen/Qwen2.5-7B-Instruct-GGUF", "downloads": 1234, "likes": 56,
                          "lastModified": "2026-10-01T00:00:00.000Z", "tags": ["gguf", "chat"]},
                         {"modelId": "org/other"}, "junk"]).encode()
    with recording_server("127.0.0.1", body=answer) as hub:
        root = site(config=f"mirror: {hub.url}\n")
        res = run_cli("-C", str(root), "models", "search", "qwen", "--json", "--limit", "5")
    assert res.exit_code == 0, res.stderr
    assert [m["repo"] for m in json.loads(res.stdout)["models"]] == ["Qwen/Qwen2.5-7B-Instruct-GGUF", "org/other"]
    assert hub.seen[0].path.startswith("/api/models?") and "search=qwen" in hub.seen[0].path


def test_search_on_an_endpoint_that_cannot_search_is_an_error(site: Callable[..., Path]) -> None:
    with recording_server("127.0.0.1", body=b"") as mirror:
        root = site(config=f"mirror: {mirror.url}\n")
        res = run_cli("-C", str(root), "models", "search", "qwen")
    assert res.exit_code == 1 and "does not search" in res.stderr


def test_gguf_quantizations_from_file_names() -> None:
    assert _gguf_quant("qwen2.5-7b-instruct-q4_k_m.gguf") == "Q4_K_M"
    assert _gguf_quant("Llama-3-8B.IQ3_XS.gguf") == "IQ3_XS"
    assert _gguf_quant("model-Q8_0-00001-of-00002.gguf") == "Q8_0"
    assert _gguf_quant("big/model-bf16.gguf") == "BF16"
