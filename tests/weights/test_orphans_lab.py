"""Weights GC on a real lab host: after a model leaves the catalog, `weights orphans` lists
exactly its cache entry, and `--collect` reclaims it while an operator's file beside it,
and the entry still wanted, stay untouched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.weights.names import cache_name
from tests.support.cli import run_cli
from tests.support.lab import Lab, lab

pytestmark = pytest.mark.lab

RETIRED = "https://models.example/retired-7b.gguf"
TINY = "file:///srv/models/tiny.gguf"  # the lab catalog's source


@pytest.fixture
def one_host(tmp_path: Path) -> Iterator[Lab]:
    with lab(tmp_path, nodes=1, prefix="llmgw-gc") as it:
        yield it


def test_collect_reclaims_only_the_orphan(one_host: Lab) -> None:
    site = one_host.site
    cache = "/var/cache/llmgw"
    orphan, wanted = cache_name(RETIRED), cache_name(TINY)
    setup = (f"mkdir -p {cache} && head -c 2000000 /dev/zero > {cache}/{orphan} && "
             f"head -c 1000 /dev/zero > {cache}/{wanted} && echo mine > {cache}/operator-notes.gguf")
    made = one_host.ansible("node1", "-m", "ansible.builtin.shell", "-a", setup)
    assert made.returncode == 0, made.stdout + made.stderr

    gathered = run_cli("-C", str(site), "facts")
    assert gathered.exit_code == 0, gathered.stdout + gathered.stderr
    listed = run_cli("-C", str(site), "weights", "orphans", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert json.loads(listed.stdout) == {
        "orphans": [{"host": "node1", "name": orphan, "path": f"{cache}/{orphan}", "size_bytes": 2000000}],
        "total_bytes": 2000000, "kept_for_state": []}  # nothing here is kept only for the state's replicas

    collected = run_cli("-C", str(site), "weights", "orphans", "--collect")
    assert collected.exit_code == 0, collected.stdout + collected.stderr
    assert "Asked to remove 1 entry; the hosts removed 1 (1.9 MiB)." in collected.stdout

    left = one_host.per_host(f"ls -A {cache}")["node1"]
    assert orphan not in left
    assert wanted in left and "operator-notes.gguf" in left
    # The facts cache forgets what was removed, so nothing is listed twice.
    again = run_cli("-C", str(site), "weights", "orphans", "--json")
    assert json.loads(again.stdout)["orphans"] == []
