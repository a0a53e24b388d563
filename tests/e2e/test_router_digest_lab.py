"""The router and engine roles do only what changed, and still repair drift (issue #33), on the shared lab.

The role digests what it installs on the control host and re-hashes the installed files on
the router in one check (roles/llmgw_router/tasks/check.yml). Shown here with the real role
on the lab's router: a delivery to a router nothing of changed changes no task and skips
the install; a router unit edited by hand is written back, reloaded and restarted by the
next apply that delivers to the routers (a rolling move of the tiny replica). The engine role
does the same for a host's base install (tasks/check.yml): a shard started on a host whose
engine is in place as recorded costs one check, and a llama-server edited by hand there is
installed again with the next shard.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import llmgw.apply.hosts as hosts_module
from llmgw.apply import hosts_for
from llmgw.apply.wheelhouse import wheelhouse
from llmgw.inventory import load_inventory
from llmgw.runner import RunEvent, run_playbook
from llmgw.site import Site
from tests.support.lab import Lab, turn

pytestmark = [pytest.mark.lab, pytest.mark.engine]

UNIT = "/etc/systemd/system/llmgw-router.service"
MARK = "LLMGW_HAND_EDITED=1"


@pytest.fixture(scope="module")
def the_lab(shared_lab: Lab) -> Iterator[Lab]:
    with turn(shared_lab) as it:  # the lab's own catalog: one tiny llama.cpp replica
        yield it


class Tasks:
    """What each Ansible task did on each host, for every playbook apply runs (a spy on the
    real runner: the runs and their results are Ansible's own)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[str] = []
        self.changed: list[tuple[str, str]] = []
        self.ran: list[tuple[str, str]] = []  # ok or changed, not skipped
        real = run_playbook

        def spy(playbook: Any, *args: Any, on_event: Callable[[RunEvent], None] | None = None,
                **kw: Any) -> Any:
            self.runs.append(str(playbook))

            def tap(event: RunEvent) -> None:
                if event.kind == "host_ok" and event.host and event.task:
                    self.ran.append((event.host, event.task))
                    if event.result.get("changed"):
                        self.changed.append((event.host, event.task))
                if on_event is not None:
                    on_event(event)

            return real(playbook, *args, on_event=tap, **kw)

        monkeypatch.setattr(hosts_module, "run_playbook", spy)


def router_host(it: Lab) -> str:
    [host] = hosts_for(Site.load(it.site)).routers
    return host


def on_router(it: Lab, command: str) -> str:
    """What `command` printed on the router host."""
    return on_host(it, router_host(it), command)


def on_host(it: Lab, host: str, command: str) -> str:
    """What `command` printed on `host`."""
    done = it.ansible(host, "-m", "ansible.builtin.shell", "-a", command)
    assert done.returncode == 0, done.stdout + done.stderr
    [play] = json.loads(done.stdout)["plays"]
    [task] = play["tasks"]
    return str(task["hosts"][host]["stdout"])


def test_an_unchanged_router_costs_one_check_and_a_hand_edited_unit_is_repaired(
        the_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    the_lab.ok("apply", "--auto-approve")
    first = time.monotonic() - t0
    [rep] = the_lab.state.replicas
    assert rep.state == "ready"
    installed = on_router(the_lab, f"cat {UNIT}")

    tasks = Tasks(monkeypatch)
    t1 = time.monotonic()
    noop = the_lab.ok("apply", "--auto-approve")
    no_change = time.monotonic() - t1
    assert "No changes" in noop.stdout
    assert tasks.runs == []  # a no-change apply contacts no host at all

    # What apply's deliveries run: the router role against an unchanged router.
    site = Site.load(the_lab.site)
    t2 = time.monotonic()
    views = hosts_for(site).deliver(site.state_file, wheelhouse(), serial=the_lab.state.serial)
    delivery = time.monotonic() - t2
    assert [v.reached for v in views] == [True]
    router = router_host(the_lab)
    assert tasks.changed == [], tasks.changed
    ran = {task for host, task in tasks.ran if host == router}
    assert "Check the installed router against its digest (one re-hash of the installed files)" in ran
    for skipped in ("Write the router unit", "Unpack the wheelhouse", "Wait for the router's admin API",
                    "Deliver the catalog, facts and inventory for the dashboard (one archive)",
                    "Unpack them into the dashboard's site folder"):
        assert f"{skipped}" not in ran, skipped

    # A hand edit of the router's unit, loaded by systemd: the next apply that reaches the
    # routers finds its hash changed, writes the unit back, reloads and restarts the router.
    on_router(the_lab, rf"sed -i '/^\[Service\]$/a Environment={MARK}' {UNIT} && systemctl daemon-reload")
    assert MARK in on_router(the_lab, "systemctl show -p Environment llmgw-router.service")
    tasks.changed.clear()
    the_lab.ok("drain", rep.shards[0].node)
    t3 = time.monotonic()
    the_lab.ok("apply", "--auto-approve")  # a rolling move of the replica
    move = time.monotonic() - t3
    print("router digest lab timings:", {"first apply": round(first, 1), "no-change apply": round(no_change, 1),
                                         "unchanged router delivery": round(delivery, 1),
                                         "rolling move with a repair": round(move, 1)})
    [moved] = the_lab.state.replicas
    assert moved.id != rep.id and moved.state == "ready" and moved.shards[0].node != rep.shards[0].node
    assert on_router(the_lab, f"cat {UNIT}") == installed
    assert MARK not in on_router(the_lab, "systemctl show -p Environment llmgw-router.service")
    assert (router, "Write the router unit") in tasks.changed
    assert (router, "Restart the router") in tasks.changed


def test_the_routers_dashboard_shows_the_site_copy_apply_made_on_the_bastion(the_lab: Lab) -> None:
    """The router's dashboard reads what apply made on the bastion and shipped in its site copy
    (placement.json, fabrics.json: #34): its pages say what the bastion's views say, and none
    says a shipped file is missing or unreadable."""
    the_lab.ok("apply", "--auto-approve")
    shipped = on_router(the_lab, "ls /var/lib/llmgw-router/site").split()
    assert {"placement.json", "fabrics.json", "fleet.json", "hosts.yml"} <= set(shipped), shipped
    ask = ("python3 -c 'import json, sys, urllib.request; print(json.dumps({p: urllib.request.urlopen("
           "\"http://127.0.0.1:8001\" + p).read().decode() for p in sys.argv[1:]}))' / /fabrics /api/v1/fabrics "
           + " ".join(f"/nodes/{n}" for n in sorted(load_inventory(Site.load(the_lab.site).inventory).nodes)))
    pages = json.loads(on_router(the_lab, ask))
    bastion = json.loads(the_lab.ok("fabrics", "--json").stdout)
    assert [f["id"] for f in json.loads(pages["/api/v1/fabrics"])["fabrics"]] == [f["id"] for f in bastion["fabrics"]]
    for path, html in pages.items():
        assert "not known here" not in html, (path, html)
        assert "Traceback" not in html and "not readable" not in html, path
    assert "<h1>Fabrics</h1>" in pages["/fabrics"]


ENGINE_CHECK = "Check the installed engine against its digest (one re-hash of the installed files)"
ENGINE_INSTALL = ("Create the engine group", "Create the engine user", "Create the engine user's home",
                  "Create the llama.cpp folder", "Install llama-server")


def move_to(it: Lab, target: str) -> str:
    """Drain every other node and apply (a rolling move onto `target`); returns where the replica was."""
    [rep] = it.state.replicas
    was = rep.shards[0].node
    for host in load_inventory(Site.load(it.site).inventory).nodes.values():
        if host.name != target and host.node_state != "cordoned":
            it.ok("cordon", host.name)
    if load_inventory(Site.load(it.site).inventory).nodes[target].node_state != "ready":
        it.ok("uncordon", target)
    it.ok("drain", was)
    it.ok("apply", "--auto-approve")
    [moved] = it.state.replicas
    assert moved.state == "ready" and moved.shards[0].node == target, moved
    return was


def test_an_engine_in_place_costs_one_check_and_an_edited_binary_is_reinstalled(
        the_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever the test before left: the tiny replica, ready, on one host (an apply converges it).
    the_lab.ok("apply", "--auto-approve")
    [rep] = the_lab.state.replicas
    here = rep.shards[0].node
    there = next(n for n in sorted(load_inventory(Site.load(the_lab.site).inventory).nodes) if n != here)
    move_to(the_lab, there)  # its engine installed (and recorded) there, if it was not before

    # llama-server edited by hand where the replica was: the re-hash fails there, and the
    # next shard that host runs comes with the engine installed again (and serving).
    binary = "/opt/llmgw/engines/llamacpp/*/llama-server"  # one build on the lab's hosts
    installed = on_host(the_lab, here, f"sha256sum {binary}").split()[0]
    on_host(the_lab, here, f'for f in {binary}; do printf x >> "$f"; done')
    assert on_host(the_lab, here, f"sha256sum {binary}").split()[0] != installed
    tasks = Tasks(monkeypatch)
    move_to(the_lab, here)
    assert (here, ENGINE_CHECK) in tasks.ran
    assert (here, "Install llama-server") in tasks.changed, tasks.changed
    assert on_host(the_lab, here, f"sha256sum {binary}").split()[0] == installed

    # Back onto the host whose engine is in place as recorded: one check, none of the install.
    tasks.changed.clear()
    tasks.ran.clear()
    move_to(the_lab, there)
    ran = {task for host, task in tasks.ran if host == there}
    assert ENGINE_CHECK in ran
    assert not ran & set(ENGINE_INSTALL), ran & set(ENGINE_INSTALL)
