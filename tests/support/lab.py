"""A throwaway lab for tests on real hosts: a copy of inventories/lab under its own name.

Tests never touch an operator's lab: the copy lives in a temp folder, the lab has a
unique name, and `lab down` runs whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from llmgw.inventory import load_inventory
from llmgw.site import Site
from llmgw.state import State, read_state
from tests.support.cli import Result, run_cli

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@dataclass
class Lab:
    site: Path
    name: str

    def cli(self, *args: str) -> Result:
        return run_cli("-C", str(self.site), *args)

    def ok(self, *args: str) -> Result:
        result = self.cli(*args)
        assert result.exit_code == 0, f"llmgw {' '.join(args)}: {result.stdout}\n{result.stderr}"
        return result

    @property
    def state(self) -> State:
        return read_state(Site.load(self.site).state_file)

    @property
    def router_url(self) -> str:
        inv = load_inventory(self.site / "hosts.yml")
        host = inv.routers[sorted(inv.routers)[0]]
        return f"http://{host.mgmt_address}:8000"

    def ansible(self, pattern: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
        return subprocess.run([str(VENV_BIN / "ansible"), "-i", str(self.site / "hosts.yml"), pattern, *args],
                              capture_output=True, text=True, env=env, check=False, timeout=300)

    def per_host(self, command: str) -> dict[str, set[str]]:
        """Host -> the words `command` printed there, run on every lab node over SSH."""
        done = self.ansible("llmgw_nodes", "-m", "ansible.builtin.shell", "-a", command)
        assert done.returncode == 0, done.stdout + done.stderr
        out: dict[str, set[str]] = {}
        for play in json.loads(done.stdout)["plays"]:
            for task in play["tasks"]:
                for host, res in task["hosts"].items():
                    out[host] = {u for u in res.get("stdout", "").split() if u}
        return out

    def shard_units(self) -> dict[str, set[str]]:
        """Host -> llmgw shard units installed there (unit files), as the hosts say."""
        return self.per_host("cd /etc/systemd/system && ls llmgw-*.service 2>/dev/null "
                              "| grep -v '^llmgw-router' || true")

    def active_units(self) -> dict[str, set[str]]:
        """Host -> llmgw shard units systemd runs there."""
        return self.per_host("systemctl list-units --state=active --plain --no-legend 'llmgw-*' "
                              "| awk '{print $1}' | grep -v '^llmgw-router' || true")

    def recorded_units(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for r in self.state.replicas:
            for s in r.shards:
                out.setdefault(s.node, set()).add(s.unit)
        return out


@contextmanager
def lab(tmp: Path, nodes: int = 3, prefix: str = "llmgw-e2e") -> Iterator[Lab]:
    site = tmp / "lab"
    shutil.copytree(REPO / "inventories" / "lab", site,
                    ignore=shutil.ignore_patterns(".lab", "hosts.yml", "state.json*", "facts", "*.sqlite"))
    it = Lab(site, f"{prefix}-{uuid.uuid4().hex[:8]}")
    try:
        it.ok("lab", "up", "--nodes", str(nodes), "--name", it.name)
        yield it
    finally:
        run_cli("-C", str(site), "lab", "down", "--name", it.name)
