"""The lab's expected failures say what to run next; none of these start a container."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.lab import node_specs
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventories" / "lab"


def test_without_podman_the_hint_is_setup_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    r = run_cli("-C", str(LAB), "lab", "status")
    assert r.exit_code == 1
    assert "podman is not installed" in r.stderr
    assert "scripts/setup-host" in r.stderr


def test_without_the_base_image_the_hint_is_build_image(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLMGW_IMAGE", "localhost/llmgw-test:no-such-tag")
    site = tmp_path / "site"
    site.mkdir()
    (site / "llmgw.yaml").write_text("inventory: hosts.yml\n")
    r = run_cli("-C", str(site), "lab", "up", "--name", "llmgw-test-noimage")
    assert r.exit_code == 1
    assert "scripts/build-image" in r.stderr
    assert not (site / "hosts.yml").exists()


def test_a_bad_lab_name_is_refused() -> None:
    r = run_cli("-C", str(LAB), "lab", "status", "--name", "Bad Name")
    assert r.exit_code == 1
    assert "is not a lab name" in r.stderr


def test_node_count_is_bounded() -> None:
    r = run_cli("-C", str(LAB), "lab", "up", "--nodes", "0")
    assert r.exit_code == 2


def test_the_first_node_differs_from_the_others() -> None:
    specs = node_specs(3)
    assert [s.host for s in specs] == ["node1", "node2", "node3"]
    assert specs[0].memory_mb > specs[1].memory_mb
    assert specs[0].labels != specs[1].labels


def test_the_lab_site_is_valid() -> None:
    r = run_cli("-C", str(LAB), "catalog", "validate")
    assert r.exit_code == 0, r.stderr
