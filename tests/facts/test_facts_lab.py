"""`llmgw facts` on the lab: real hosts over SSH, facts checked against what each container has.

The lab runs from a copy of inventories/lab under a name of its own, so an operator's
running lab is never touched. Stopping a host, then gathering again, keeps its last
facts marked stale.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.facts.cache import read_facts
from llmgw.inventory import load_inventory
from tests.support.cli import run_cli

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Path]:
    site = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", site,
                    ignore=shutil.ignore_patterns(".lab", "hosts.yml", "state.json*", "facts"))
    name = f"llmgw-facts-{uuid.uuid4().hex[:8]}"
    up = run_cli("-C", str(site), "lab", "up", "--nodes", "2", "--name", name)
    try:
        assert up.exit_code == 0, up.stdout + up.stderr
        yield site
    finally:
        run_cli("-C", str(site), "lab", "down", "--name", name)


def df(container: str, path: str) -> tuple[int, int]:
    """(total, available) bytes of the file system holding `path`, as df inside the container sees it."""
    proc = podman("exec", container, "df", "-B1", "--output=size,avail", path)
    assert proc.returncode == 0, proc.stderr
    size, avail = proc.stdout.splitlines()[-1].split()
    return int(size), int(avail)


def test_facts_on_the_lab_match_the_containers(lab: Path) -> None:
    gathered = run_cli("-C", str(lab), "facts", "--json")
    assert gathered.exit_code == 0, gathered.stdout + gathered.stderr
    assert json.loads(gathered.stdout) == {"gathered": ["node1", "node2"], "stale": [], "failed": []}

    inventory = load_inventory(lab / "hosts.yml")
    facts = read_facts(lab / "facts")
    assert sorted(facts) == ["node1", "node2"]
    for name, host in inventory.nodes.items():
        f = facts[name]
        container = host.vars["llmgw_lab_container"]
        # Memory: the container's --memory limit, not this machine's MemTotal.
        assert f.memory_total_mb == host.vars["llmgw_lab_memory_mb"]
        nproc = podman("exec", container, "nproc").stdout.strip()
        assert f.cpus == int(nproc)
        # Disk: every configured dir's file system once, sized as df sees it.
        assert f.filesystems is not None
        paths = {p: fs for fs in f.filesystems for p in fs.paths}
        for d in [*host.model_dirs, host.cache_dir]:
            exists = podman("exec", container, "test", "-d", d).returncode == 0
            assert (d in paths) == exists, (d, exists)
        for path, fs in paths.items():
            total, avail = df(container, path)
            assert fs.total_bytes == total
            assert abs(fs.free_bytes - avail) < 64 * 1024 * 1024  # the disk is shared with other writers
        assert len({(fs.mount, fs.device) for fs in f.filesystems}) == len(f.filesystems)
        # The tiny model is an operator file on the models share.
        assert f.weights is not None
        assert "/srv/models/tiny.gguf" in [w.path for w in f.weights if not w.cache]
        assert f.units is not None and f.units_unknown_reason is None  # systemd answers on lab hosts
        assert f.gpus is None and f.gpus_unknown_reason
        assert f.ib_adapters == []
    assert facts["node1"].memory_total_mb is not None and facts["node2"].memory_total_mb is not None
    assert facts["node1"].memory_total_mb > facts["node2"].memory_total_mb

    nodes = run_cli("-C", str(lab), "nodes", "--json")
    assert nodes.exit_code == 0, nodes.stderr
    shown = {n["node"]: n for n in json.loads(nodes.stdout)["nodes"]}
    assert shown["node1"]["memory_mb"] == inventory.nodes["node1"].vars["llmgw_lab_memory_mb"]
    assert shown["node2"]["gpus"] is None and shown["node2"]["last_seen"] is not None

    # A host goes away: its last facts stay, marked stale; the other is gathered again.
    assert podman("stop", "-t", "2", inventory.nodes["node2"].vars["llmgw_lab_container"]).returncode == 0
    again = run_cli("-C", str(lab), "facts", "--json")
    assert again.exit_code == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert report["gathered"] == ["node1"]
    assert [s["host"] for s in report["stale"]] == ["node2"]
    node2 = read_facts(lab / "facts")["node2"]
    assert node2.stale_since is not None and node2.memory_total_mb == facts["node2"].memory_total_mb
    table = run_cli("-C", str(lab), "nodes").stdout
    assert "(stale)" in next(line for line in table.splitlines() if line.startswith("node2 "))
