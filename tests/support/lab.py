"""A throwaway lab for tests on real hosts: a copy of inventories/lab under its own name.

Tests never touch an operator's lab: the copy lives in a temp folder, the lab has a
unique name, and `lab down` runs whatever happens.

- `lab(tmp, nodes)`: a lab of its own, for a test area that changes the hosts themselves.
- `shape(lab, catalog=..., host_vars=..., groups=..., config=...)`: the one builder of a test
  area's site (its catalog, inventory variables and groups, llmgw.yaml lines), then facts.
- `turn(shared, ...)`: a test area's turn on the session's shared lab (the `shared_lab`
  fixture in tests/conftest.py): `shape` on entry; on exit the site as it was; before the
  next turn (`clear`) every replica removed by an apply (which also puts the router back as
  the inventory says), every key revoked, so each area starts from a fleet with nothing on
  it. Installing the router once for all areas is what makes the suite cheaper as it grows;
  starting hosts costs little (`lab up`: 2-9 s for one to three), clearing them often a lot
  (the apply: 16 s at load 4, 43-113 s at load 7-15, 2026-12-04), so an area that needs
  one host keeps one of its own, and so does one whose turn would cost more than its own
  first apply (#33).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw.inventory import load_inventory
from llmgw.site import SITE_FILE, Site
from llmgw.state import State, read_state
from llmgw.yamlio import atomic_write, dumps_yaml, load_yaml
from tests.support.cli import Result, run_cli

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# The lab's own catalog: the tiny model (one CPU replica of llama-server).
TINY = (REPO / "inventories" / "lab" / "catalog" / "tiny.yaml").read_text()
SHARED_NODES = 3  # the shared lab: node1 (router, the larger host), node2, node3
# What a turn on the shared lab leaves in its site for the next: the state (one lineage for
# the hosts' units) and the engine key secret the units were started with.
KEEP = ("state.json*", "*.secret")


@dataclass
class Lab:
    site: Path
    name: str
    # A shared lab whose fleet still holds what the last turn left there (its replicas, keys):
    # the next turn clears it first, and after the session's last turn `lab down` does (#33).
    untidy: bool = False

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


def site_copy(tmp: Path) -> Path:
    """The lab site (inventories/lab) copied under `tmp`, without an operator's runtime files."""
    site = tmp / "lab"
    shutil.copytree(REPO / "inventories" / "lab", site,
                    ignore=shutil.ignore_patterns(".lab", "hosts.yml", "state.json*", "facts", "*.sqlite"))
    return site


def lab_name(prefix: str) -> str:
    """A lab name no other test run uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def shape(it: Lab, *, catalog: Mapping[str, str] | None = None,
          host_vars: Mapping[str, Mapping[str, Any]] | None = None,
          groups: Mapping[str, Mapping[str, Any]] | None = None, config: str = "", facts: bool = True) -> Lab:
    """Give the lab's site what a test area needs, then gather facts.

    catalog: file name -> text, replacing the catalog folder's files (None: the lab's tiny.yaml);
    host_vars: host -> variables set on it in hosts.yml; groups: group -> its inventory entry
    (`{"hosts": {...}, "vars": {...}}`), added or replaced under `all.children`; config: lines
    added to llmgw.yaml.
    """
    folder = it.site / "catalog"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    for name, text in (catalog if catalog is not None else {"tiny.yaml": TINY}).items():
        (folder / name).write_text(text)
    if host_vars or groups:
        hosts = it.site / "hosts.yml"
        doc = load_yaml(hosts)
        children = doc["all"]["children"]
        nodes = children["llmgw_nodes"]["hosts"]  # where `lab up` writes each host's variables
        for host, values in (host_vars or {}).items():
            nodes[host] = {**(nodes[host] or {}), **values}
        for name, entry in (groups or {}).items():
            children[name] = dict(entry)
        atomic_write(hosts, dumps_yaml(doc))
    if config:
        site_file = it.site / SITE_FILE
        site_file.write_text(site_file.read_text() + config.rstrip("\n") + "\n")
    if facts:
        it.ok("facts")
    return it


def clear(shared: Lab) -> None:
    """Remove what the last turn left on the shared lab's fleet: an apply of the empty catalog
    (which removes every replica and runs the router role with the shared inventory again),
    then every key revoked; checked: no replica in the state, no shard unit running."""
    start, took = time.monotonic(), {}
    shared.ok("apply", "--auto-approve")
    took["apply"], start = time.monotonic() - start, time.monotonic()
    keys = json.loads(shared.ok("keys", "list", "--json").stdout)["keys"]
    for key in keys:
        shared.ok("keys", "revoke", key["id"])
    took[f"{len(keys)} keys revoked"], start = time.monotonic() - start, time.monotonic()
    assert shared.state.replicas == [], shared.state.replicas
    assert all(not us for us in shared.active_units().values()), shared.active_units()
    took["units checked"] = time.monotonic() - start
    shared.untidy = False
    # Printed, never asserted (#33: where the lab batch's minutes go; `pytest -s` shows it).
    print(f"lab {shared.name}: cleared (s)", {k: round(v, 1) for k, v in took.items()})


@contextmanager
def turn(shared: Lab, **kw: Any) -> Iterator[Lab]:
    """A test area's turn on the shared lab: `shape(shared, **kw)`, and everything undone after.

    The site is put back as it was on exit; the fleet is cleared (`clear`) when the next turn
    starts, so an area always starts from a fleet with nothing on it, and the session's last
    turn costs no clearing apply (a minute on a loaded machine) for hosts about to be removed.
    """
    if shared.untidy:
        clear(shared)
    saved = {path: path.read_bytes() for path in (shared.site / "hosts.yml", shared.site / SITE_FILE)}
    present = set(shared.site.iterdir())
    start = time.monotonic()
    try:
        yield shape(shared, **kw)
    finally:
        print(f"lab {shared.name}: a turn of {time.monotonic() - start:.0f} s")
        # The site as it was (an area's drains and cordons included; what its commands left
        # there, such as bench and check results, gone) and an empty catalog, for `clear`.
        for path, data in saved.items():
            atomic_write(path, data)
        for path in set(shared.site.iterdir()) - present:
            if path.is_file() and not any(path.match(keep) for keep in KEEP):
                path.unlink()
        shape(shared, catalog={}, facts=False)
        shared.untidy = True


@contextmanager
def lab(tmp: Path, nodes: int = 3, prefix: str = "llmgw-e2e") -> Iterator[Lab]:
    site = site_copy(tmp)
    it = Lab(site, lab_name(prefix))
    start = time.monotonic()
    try:
        it.ok("lab", "up", "--nodes", str(nodes), "--name", it.name)
        print(f"lab {it.name}: up ({nodes} hosts) in {time.monotonic() - start:.0f} s")
        yield it
    finally:
        start = time.monotonic()
        run_cli("-C", str(site), "lab", "down", "--name", it.name)
        print(f"lab {it.name}: down in {time.monotonic() - start:.0f} s")
