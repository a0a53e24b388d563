"""The lab for real: three podman hosts up, Ansible reaches each over SSH, down leaves nothing.

Each test lab runs from a copy of inventories/lab under a unique name, so a test never
touches an operator's running lab (and two test runs never touch each other's).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.inventory import load_inventory
from tests.support.cli import run_cli
from tests.support.lab import VENV_BIN, lab_name, site_copy

pytestmark = pytest.mark.lab

def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False)


def lab_containers(name: str) -> list[str]:
    return podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"label=llmgw.lab={name}").stdout.split()


@pytest.fixture
def lab_site(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A copy of the lab site without any runtime files, and a lab name of its own."""
    site, name = site_copy(tmp_path), lab_name("llmgw-test")
    yield site, name
    run_cli("-C", str(site), "lab", "down", "--name", name)


def ansible(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(VENV_BIN / "ansible"), "-i", str(inventory), *args],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def test_up_ping_over_ssh_then_down(lab_site: tuple[Path, str]) -> None:
    site, name = lab_site
    up = run_cli("-C", str(site), "lab", "up", "--nodes", "3", "--name", name)
    assert up.exit_code == 0, up.stderr
    assert "ansible -i" in up.stdout

    inventory = load_inventory(site / "hosts.yml")
    assert sorted(inventory.nodes) == ["node1", "node2", "node3"]
    assert list(inventory.routers) == ["node1"]
    big, small = inventory.nodes["node1"], inventory.nodes["node2"]
    assert big.labels == {"role": "coding", "size": "large"}
    assert small.labels == {"role": "general", "size": "small"}
    assert big.vars["llmgw_lab_memory_mb"] > small.vars["llmgw_lab_memory_mb"]
    for host in inventory.nodes.values():
        assert host.node_state == "ready"
        assert host.model_dirs == ["/srv/models"]
        assert host.cache_dir == "/var/cache/llmgw"
        assert host.mgmt_address == host.vars["ansible_host"]
        assert host.vars["ansible_user"] == "root"

    ping = ansible(site / "hosts.yml", "all", "-m", "ping")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    for host in ("node1", "node2", "node3"):
        assert f"{host} | SUCCESS" in ping.stdout
    # Over SSH, not through podman: sshd sets SSH_CONNECTION for the session, from this host.
    via = ansible(site / "hosts.yml", "all", "-m", "ansible.builtin.command", "-a", "printenv SSH_CONNECTION")
    assert via.returncode == 0, via.stdout + via.stderr
    # SSH_CONNECTION is "client-address client-port server-address 22".
    assert len(re.findall(r"^\S+ \d+ \S+ 22$", via.stdout, re.M)) == 3, via.stdout

    # The memory limit and the model share are real inside each host.
    limit = podman("exec", f"{name}-node2", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    assert int(limit.stdout) == small.vars["llmgw_lab_memory_mb"] * 1024 * 1024
    assert podman("exec", f"{name}-node1", "test", "-d", "/srv/models").returncode == 0

    status = run_cli("-C", str(site), "lab", "status", "--json")
    assert status.exit_code == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["lab"] == name and doc["network"] == name
    assert [(n["host"], n["state"]) for n in doc["nodes"]] == [(f"node{i}", "running") for i in (1, 2, 3)]

    down = run_cli("-C", str(site), "lab", "down")  # finds the lab's name in .lab/name
    assert down.exit_code == 0, down.stderr
    assert f"Removed 3 containers and network {name}" in down.stdout
    assert lab_containers(name) == []
    assert podman("network", "exists", name).returncode != 0
    assert not (site / "hosts.yml").exists()


def test_up_keeps_running_nodes_and_down_touches_only_its_own(lab_site: tuple[Path, str]) -> None:
    site, name = lab_site
    assert run_cli("-C", str(site), "lab", "up", "--nodes", "2", "--name", name).exit_code == 0
    ids = podman("ps", "-q", "--no-trunc", "--filter", f"label=llmgw.lab={name}").stdout.split()
    # An operator's edit to the inventory survives the next `up`.
    inv = site / "hosts.yml"
    inv.write_text(inv.read_text().replace("llmgw_node_state: ready", "llmgw_node_state: cordoned", 1))
    # A bystander named like a lab host, but not made by this lab.
    bystander = f"{name}-node9"
    assert podman("create", "--name", bystander, "localhost/llmgw-test:bookworm", "true").returncode == 0
    try:
        again = run_cli("-C", str(site), "lab", "up", "--nodes", "2")
        assert again.exit_code == 0, again.stderr
        assert sorted(podman("ps", "-q", "--no-trunc", "--filter", f"label=llmgw.lab={name}").stdout.split()) \
            == sorted(ids)
        assert load_inventory(inv).nodes["node1"].node_state == "cordoned"

        down = run_cli("-C", str(site), "lab", "down")
        assert down.exit_code == 0, down.stderr
        assert lab_containers(name) == []
        assert podman("container", "exists", bystander).returncode == 0
    finally:
        podman("rm", "-f", bystander)


def test_down_refuses_a_lab_of_another_site(lab_site: tuple[Path, str], tmp_path: Path) -> None:
    site, name = lab_site
    other = f"{name}-node1"
    made = podman("create", "--name", other, "--label", f"llmgw.lab={name}", "--label", "llmgw.lab.site=/elsewhere",
                  "--label", "llmgw.lab.host=node1", "localhost/llmgw-test:bookworm", "true")
    assert made.returncode == 0, made.stderr
    try:
        down = run_cli("-C", str(site), "lab", "down", "--name", name)
        assert down.exit_code == 1
        assert "already runs for another site: /elsewhere" in down.stderr
        assert podman("container", "exists", other).returncode == 0
        up = run_cli("-C", str(site), "lab", "up", "--name", name)
        assert up.exit_code == 1
        assert "--name NAME" in up.stderr
    finally:
        podman("rm", "-f", other)
