"""Weights GC on a real lab host: after a model leaves the catalog, `weights orphans` lists
exactly its cache entry, and `--collect` reclaims it while an operator's file beside it,
and the entry still wanted, stay untouched."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.weights.names import cache_name
from tests.helpers import run_cli

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
RETIRED = "https://models.example/retired-7b.gguf"
TINY = "file:///srv/models/tiny.gguf"  # the lab catalog's source


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    site = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", site,
                    ignore=shutil.ignore_patterns(".lab", "hosts.yml", "state.json*", "facts"))
    name = f"llmgw-gc-{uuid.uuid4().hex[:8]}"
    up = run_cli("-C", str(site), "lab", "up", "--nodes", "1", "--name", name)
    try:
        assert up.exit_code == 0, up.stdout + up.stderr
        containers = podman("ps", "--format", "{{.Names}}", "--filter", f"label=llmgw.lab={name}").stdout.split()
        assert len(containers) == 1, containers
        yield site, containers[0]
    finally:
        run_cli("-C", str(site), "lab", "down", "--name", name)


def test_collect_reclaims_only_the_orphan(lab: tuple[Path, str]) -> None:
    site, container = lab
    cache = "/var/cache/llmgw"
    orphan, wanted = cache_name(RETIRED), cache_name(TINY)
    setup = (f"mkdir -p {cache} && head -c 2000000 /dev/zero > {cache}/{orphan} && "
             f"head -c 1000 /dev/zero > {cache}/{wanted} && echo mine > {cache}/operator-notes.gguf")
    assert podman("exec", container, "sh", "-c", setup).returncode == 0

    gathered = run_cli("-C", str(site), "facts")
    assert gathered.exit_code == 0, gathered.stdout + gathered.stderr
    listed = run_cli("-C", str(site), "weights", "orphans", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert json.loads(listed.stdout) == {
        "orphans": [{"host": "node1", "name": orphan, "path": f"{cache}/{orphan}", "size_bytes": 2000000}],
        "total_bytes": 2000000}

    collected = run_cli("-C", str(site), "weights", "orphans", "--collect")
    assert collected.exit_code == 0, collected.stdout + collected.stderr
    assert "Asked to remove 1 entry; the hosts removed 1 (1.9 MiB)." in collected.stdout

    left = podman("exec", container, "ls", "-A", cache).stdout.split()
    assert orphan not in left
    assert wanted in left and "operator-notes.gguf" in left
    # The facts cache forgets what was removed, so nothing is listed twice.
    again = run_cli("-C", str(site), "weights", "orphans", "--json")
    assert json.loads(again.stdout)["orphans"] == []
