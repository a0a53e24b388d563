"""`llmgw facts` for real: playbooks/facts.yml through the runner on this machine's local
connection, and a host that cannot be reached, across several gatherings."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.gather import TASK_FABRIC, TASK_GPU, TASK_IB, TASK_NODE, facts_from_results, keep_stale
from llmgw.runner import TaskResult
from tests.support.cli import run_cli

PY = sys.executable


def make_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "models").mkdir(parents=True)
    (site / "models" / "m.gguf").write_bytes(b"GGUF" + b"\0" * 1000)
    (site / "llmgw.yaml").write_text("inventory: hosts.yml\n")
    local = f"ansible_connection: local, ansible_python_interpreter: {PY}"
    (site / "hosts.yml").write_text(f"""
all:
  vars:
    llmgw_model_dirs: [{site / 'models'}, /nonexistent/models]
    llmgw_cache_dir: {site / 'cache'}
  children:
    llmgw_nodes:
      hosts:
        here-1: {{{local}}}
        here-2: {{{local}}}
        gone: {{ansible_host: 127.0.0.1, ansible_port: 1}}
    llmgw_routers:
      hosts:
        router: {{{local}}}
""")
    return site


def meminfo_mb() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:")) // 1024


def test_gather_then_keep_an_unreachable_hosts_last_facts(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    first = run_cli("-C", str(site), "facts", "--json")
    assert first.exit_code == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["gathered"] == ["here-1", "here-2"]
    assert report["stale"] == []
    (failed,) = report["failed"]
    assert failed["host"] == "gone" and failed["reason"].startswith("unreachable: Failed to connect")
    assert sorted(p.name for p in (site / "facts").glob("*.json")) == ["here-1.json", "here-2.json"]  # not the router

    here = read_facts(site / "facts")["here-1"]
    assert here.stale_since is None
    assert here.memory_total_mb is not None and 0 < here.memory_total_mb <= meminfo_mb()
    assert here.cpus == len(os.sched_getaffinity(0))
    assert here.gpus is None and here.gpus_unknown_reason == (
        "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) is not installed")
    (fs,) = here.filesystems or []
    assert fs.paths == [str(site / "models")]  # the cache dir and /nonexistent do not exist
    assert [w.path for w in here.weights or []] == [str(site / "models" / "m.gguf")]
    assert here.ib_adapters == [] and here.ibnetdiscover is None
    assert here.units is None and here.units_unknown_reason
    assert "Gathering" not in first.stdout  # progress goes to stderr, the JSON stays clean

    # `gone` answered once, long ago: its last good facts are kept, marked stale.
    earlier = here.model_copy(update={"host": "gone", "gathered_at": datetime(2026, 1, 1, tzinfo=UTC)})
    write_facts(site / "facts", earlier)
    second = run_cli("-C", str(site), "facts")
    assert second.exit_code == 0, second.stderr
    assert "Facts: gathered 2, stale 1, failed 0." in second.stdout
    assert "  gone: unreachable: Failed to connect to the host via ssh" in second.stdout
    assert "kept its last facts, stale since" in second.stdout
    assert "ok here-1: GPUs unknown" in second.stderr and "failed gone: " in second.stderr
    gone = read_facts(site / "facts")["gone"]
    assert gone.stale_since is not None and gone.stale_reason and gone.stale_reason.startswith("unreachable:")
    assert gone.model_copy(update={"stale_since": None, "stale_reason": None}) == earlier

    # Still unreachable: stale since the first miss. Only the limited host is touched.
    here_1 = (site / "facts" / "here-1.json").read_bytes()
    third = run_cli("-C", str(site), "facts", "--limit", "gone")
    assert third.exit_code == 1
    assert "Error: no host could be gathered (1 stale, 0 failed)" in third.stderr
    assert "Facts: gathered 0, stale 1, failed 0." in third.stdout
    assert read_facts(site / "facts")["gone"].stale_since == gone.stale_since
    assert (site / "facts" / "here-1.json").read_bytes() == here_1

    nodes = run_cli("-C", str(site), "nodes")
    assert nodes.exit_code == 0
    assert "(stale)" in next(line for line in nodes.stdout.splitlines() if line.startswith("gone "))


def test_a_limit_that_selects_no_node_is_a_usage_error(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    result = run_cli("-C", str(site), "facts", "--limit", "router")
    assert result.exit_code == 2
    assert "--limit router selects no node" in result.stderr
    assert not (site / "facts").exists()


def _ok(task: str, facts: dict[str, object]) -> TaskResult:
    return TaskResult(host="h", task=task, action="x", status="ok", result={"ansible_facts": facts})


def test_facts_from_results_unknown_stays_unknown() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    only_gpu = facts_from_results("h", {TASK_GPU: _ok(TASK_GPU, {"llmgw_gpus": [], "llmgw_gpus_unknown_reason": None})},
                                  now)
    assert only_gpu.gpus == [] and only_gpu.memory_total_mb is None and only_gpu.filesystems is None
    adapters: list[dict[str, object]] = [{"name": "mlx5_0", "node_guid": None, "node_desc": None, "ports": []}]
    full = facts_from_results("h", {
        TASK_NODE: _ok(TASK_NODE, {"llmgw_memory_total_mb": 100, "llmgw_cpus": 2, "llmgw_filesystems": [],
                                   "llmgw_weights": [], "llmgw_units": [], "llmgw_engines": {}}),
        TASK_GPU: _ok(TASK_GPU, {"llmgw_gpus": None, "llmgw_gpus_unknown_reason": "no driver"}),
        TASK_IB: _ok(TASK_IB, {"llmgw_ib_adapters": adapters, "llmgw_ibnetdiscover": None}),
        TASK_FABRIC: _ok(TASK_FABRIC, {"llmgw_ib_adapters": adapters, "llmgw_ibnetdiscover": "# Topology\n",
                                       "llmgw_ibnetdiscover_reason": None}),
    }, now)
    assert (full.memory_total_mb, full.cpus, full.filesystems, full.gpus) == (100, 2, [], None)
    assert full.ibnetdiscover == "# Topology\n" and full.ib_adapters is not None
    stale = keep_stale(full, "unreachable: x", now)
    assert stale.stale_since == now and keep_stale(stale, "again", datetime(2027, 1, 1, tzinfo=UTC)).stale_since == now
