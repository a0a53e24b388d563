"""`llmgw nodes` on the example site's recorded fleet: JSON, the table, `-` for unknown."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from llmgw.facts.cache import read_facts, write_facts
from llmgw.state import Replica, Shard, State, write_state
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example"


def nodes_json(site: Path) -> dict[str, dict[str, Any]]:
    result = run_cli("-C", str(site), "nodes", "--json")
    assert result.exit_code == 0, result.stderr
    return {n["node"]: n for n in json.loads(result.stdout)["nodes"]}


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example site, free to change."""
    site = tmp_path / "example"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns("state.json*"))
    return site


def test_the_recorded_fleet() -> None:
    facts = read_facts(EXAMPLE / "facts")
    assert len(facts) >= 16
    classes = {g.gpu_class for f in facts.values() for g in f.gpus or []}
    assert {"H100-80GB", "A100-40GB", "L40S-48GB"} <= classes
    nodes = nodes_json(EXAMPLE)
    assert len(nodes) == 20 and "router-01" not in nodes

    h100 = nodes["gpu-node-06"]
    assert h100["gpus"] == {"total": 8, "healthy": 7, "used": 0, "free": 7}
    assert h100["classes"] == ["H100-80GB"] and h100["memory_mb"] == 2_063_760
    assert [g["index"] for g in h100["unhealthy_gpus"]] == [3]
    assert "uncorrectable ECC" in h100["unhealthy_gpus"][0]["problems"][0]
    assert nodes["gpu-node-08"]["state"] == "cordoned" and nodes["a100-node-04"]["state"] == "draining"
    assert nodes["gpu-node-01"]["disk"]["total_bytes"] == 28 * 1024**4  # local pool, the NFS filer apart
    assert nodes["gpu-node-01"]["disk"]["shared_total_bytes"] == 500 * 1024**4

    # Two fabrics: the H100 hosts on one, the A100 hosts on another, the L40S hosts on none.
    (h100_fabric,) = nodes["gpu-node-01"]["fabrics"]
    (a100_fabric,) = nodes["a100-node-02"]["fabrics"]
    assert h100_fabric != a100_fabric
    assert all(nodes[f"gpu-node-0{i}"]["fabrics"] == [h100_fabric] for i in range(1, 9))
    assert nodes["l40s-01"]["fabrics"] == []

    # Unknown is not zero.
    cpu = nodes["cpu-01"]
    assert cpu["gpus"] is None and "no NVIDIA driver" in cpu["gpus_unknown_reason"]
    assert cpu["memory_mb"] == 15_884
    old = nodes["old-01"]
    assert old["gpus"] is None and old["disk"] is None and old["fabrics"] is None and old["memory_mb"] == 257_844
    new = nodes["new-01"]
    assert new["last_seen"] is None and new["memory_mb"] is None and new["gpus"] is None
    stale = nodes["a100-node-03"]
    assert stale["stale_since"] == "2026-11-29T22:10:41Z" and stale["stale_reason"].startswith("unreachable:")


def test_the_table_marks_unknown_with_a_dash() -> None:
    result = run_cli("-C", str(EXAMPLE), "nodes")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NODE", "STATE", "GPUS", "MEM", "DISK", "CLASSES", "STACK", "FABRICS",
                                "REPLICAS", "LAST", "SEEN"]
    rows = {line.split()[0]: line.split() for line in lines[1:21]}
    assert rows["cpu-01"][:5] == ["cpu-01", "ready", "-", "16", "GiB"]
    assert rows["new-01"] == ["new-01", "ready", "-", "-", "-", "-", "-", "-", "0", "never"]
    assert rows["old-01"][2] == "-" and rows["old-01"][5] == "-" and rows["old-01"][6] == "-" \
        and rows["old-01"][7] == "-"
    # The H200 hosts' stack: driver/CUDA, rdma-core, fabric manager where they reported them.
    stack = {line.split()[0]: line[lines[0].index("STACK"):lines[0].index("FABRICS")].strip() for line in lines[1:21]}
    assert stack["gpu-node-09"] == "580.95.05/13.0 rdma 50.0-2 fm active"
    assert stack["gpu-node-10"] == "535.183.01/12.2" and stack["gpu-node-01"] == "-" and stack["new-01"] == "-"
    assert ("Host stack versions:\n"
            "  NVIDIA driver: 580.95.05 on 1 host, 535.183.01 on 1 host, unknown on 18 hosts\n"
            "  CUDA: 13.0 on 1 host, 12.2 on 1 host, unknown on 18 hosts\n"
            "  rdma-core: 50.0-2 on 1 host, unknown on 19 hosts\n"
            "  MLNX_OFED: unknown on 20 hosts\n") in result.stdout
    assert ("GPUs placement leaves out (cordoned, or of unknown health):\n  gpu-node-10: GPU 7 cordoned "
            "(llmgw_cordoned_gpus; `llmgw uncordon gpu-node-10 --gpu 7`)") in result.stdout
    assert rows["gpu-node-06"][2] == "7/8" and rows["gpu-node-08"][1] == "cordoned"
    assert rows["a100-node-03"][-1] == "(stale)"
    assert "0/0" not in result.stdout
    text = result.stdout
    assert "Unhealthy GPUs (neither used nor free):" in text
    assert ("  gpu-node-06 GPU 3 (H100-80GB, " in text and "): GPU 3 has 2 uncorrectable ECC errors since the "
            "driver loaded; GPU 3 had a row-remapping failure: the GPU needs service" in text)
    assert "  gpu-node-07 GPU 5 (H100-80GB, " in text and "GPU 5 is thermally throttled" in text
    assert "  a100-node-03: since 2026-11-29 22:10Z: unreachable:" in text


def test_json_has_the_stack_column_and_the_fleet_versions() -> None:
    result = run_cli("-C", str(EXAMPLE), "nodes", "--json")
    assert result.exit_code == 0, result.stderr
    view = json.loads(result.stdout)
    nodes = {n["node"]: n for n in view["nodes"]}
    h200 = nodes["gpu-node-09"]
    assert h200["stack"] == "580.95.05/13.0 rdma 50.0-2 fm active"
    assert (h200["gpu_driver"], h200["cuda_version"], h200["rdma_core"], h200["ofed"], h200["fabric_manager"]) == \
        ("580.95.05", "13.0", "50.0-2", None, "active")
    assert nodes["new-01"]["stack"] == "-" and nodes["cpu-01"]["stack"] == "-"
    versions = view["versions"]
    assert versions["driver"] == {"label": "NVIDIA driver", "unknown": 18, "versions": [
        {"version": "580.95.05", "hosts": 1}, {"version": "535.183.01", "hosts": 1}]}
    assert versions["rdma_core"]["versions"] == [{"version": "50.0-2", "hosts": 1}]
    assert versions["ofed"] == {"label": "MLNX_OFED", "unknown": 20, "versions": []}
    assert all(sum(e["hosts"] for e in v["versions"]) + v["unknown"] == len(nodes) for v in versions.values())


def test_a_hostile_driver_version_cannot_break_the_table(example: Path) -> None:
    facts = read_facts(example / "facts")
    # gpu_facts reports what NVML returned; a broken or hostile string stays data.
    write_facts(example / "facts", facts["gpu-node-01"].model_copy(
        update={"gpu_driver": "570[bold]x\n9", "cuda_version": "12.8"}))
    write_facts(example / "facts", facts["gpu-node-02"].model_copy(
        update={"gpu_driver": "580.95.05", "cuda_version": "13.0", "ofed": "24.10-1.1.4.0"}))
    result = run_cli("-C", str(example), "nodes")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    row = next(line for line in lines if line.startswith("gpu-node-01 "))
    assert " 570[bold]x?9/12.8 " in row  # markup shown as text, the newline as `?`: one line
    assert len([line for line in lines[1:21] if line.strip()]) == 20
    # Counted under its leading number (570), as the planner's requirements read it.
    assert "  NVIDIA driver: 580.95.05 on 2 hosts, 570[bold]x?9 on 1 host, 535.183.01 on 1 host, " \
           "unknown on 16 hosts" in result.stdout
    assert "  MLNX_OFED: 24.10-1.1.4.0 on 1 host, unknown on 19 hosts" in result.stdout
    nodes = nodes_json(example)
    assert nodes["gpu-node-01"]["gpu_driver"] == "570[bold]x\n9"  # the JSON keeps what was reported
    assert nodes["gpu-node-02"]["stack"] == "580.95.05/13.0 ofed 24.10-1.1.4.0"


def test_gpus_used_by_replicas_are_not_free(example: Path) -> None:
    state = State(replicas=[
        Replica(id="llama-3.1-70b-1", model="llama-3.1-70b", profile="h100-tp4", engine="vllm", state="ready",
                endpoint="http://192.0.2.11:20000",
                shards=[Shard(node="gpu-node-01", rank=0, gpus=[0, 1, 2, 3], port=20000,
                              unit="llmgw-llama-3.1-70b-1-0.service")]),
        Replica(id="deepseek-v3-1", model="deepseek-v3", profile="h100-2x8", engine="sglang", state="ready",
                endpoint="http://192.0.2.16:20001",
                shards=[Shard(node="gpu-node-06", rank=0, gpus=[0, 1, 2, 4, 5, 6, 7], port=20001,
                              unit="llmgw-deepseek-v3-1-0.service"),
                        Shard(node="gpu-node-07", rank=1, gpus=[0, 1, 2, 3, 4, 6, 7], port=20001,
                              unit="llmgw-deepseek-v3-1-1.service")]),
    ])
    write_state(example / "state.json", state)
    nodes = nodes_json(example)
    assert nodes["gpu-node-01"]["gpus"] == {"total": 8, "healthy": 8, "used": 4, "free": 4}
    assert nodes["gpu-node-01"]["replicas"] == ["llama-3.1-70b-1"]
    assert nodes["gpu-node-06"]["gpus"]["free"] == 0 and nodes["gpu-node-07"]["gpus"]["free"] == 0
    assert nodes["gpu-node-02"]["replicas"] == []
    table = run_cli("-C", str(example), "nodes").stdout
    row = next(line.split() for line in table.splitlines() if line.startswith("gpu-node-01 "))
    assert row[2] == "4/8" and row[-3] == "1"


def test_unreadable_fabric_text_leaves_fabrics_unknown_with_a_note(example: Path) -> None:
    facts = read_facts(example / "facts")["gpu-node-01"]
    write_facts(example / "facts", facts.model_copy(update={"ibnetdiscover": "this is not ibnetdiscover output\n"}))
    result = run_cli("-C", str(example), "nodes", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    nodes = {n["node"]: n for n in data["nodes"]}
    # Hosts with active InfiniBand ports are on a fabric nobody could map: not known.
    assert all(nodes[f"gpu-node-0{i}"]["fabrics"] is None for i in range(1, 9))
    # A host without any active InfiniBand port is known to be on none.
    assert nodes["l40s-01"]["fabrics"] == []
    assert data["notes"] and data["notes"][0].startswith("fabrics unknown: ")


def test_a_broken_facts_file_is_an_error_naming_it(example: Path) -> None:
    (example / "facts" / "cpu-02.json").write_text("{}")
    result = run_cli("-C", str(example), "nodes")
    assert result.exit_code == 1
    assert "cpu-02.json" in result.stderr and "Traceback" not in result.stderr


def test_facts_from_the_future_are_shown_as_recorded(example: Path) -> None:
    """LAST SEEN is the recorded time, in UTC, whatever the clock says now."""
    facts = read_facts(example / "facts")["cpu-02"]
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    write_facts(example / "facts", facts.model_copy(update={"gathered_at": when}))
    assert nodes_json(example)["cpu-02"]["last_seen"] == "2030-01-02T03:04:05Z"
    assert "2030-01-02 03:04Z" in run_cli("-C", str(example), "nodes").stdout
