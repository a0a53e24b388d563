"""Two site checkouts and one fleet, on real lab hosts.

Site A applies (units carry its state's lineage). Site B, a second checkout without A's
state file, plans against the same hosts: it refuses, naming the lineage it found, and
nothing is destroyed. A's state moves to PostgreSQL and both point at it: B plans
"No changes". Then a serial written but never delivered (an apply killed between the two)
reaches the router with the next apply, although the plan has no changes; the apply after
that contacts no host.

Then the controller follows the site's git repository: a commit that scales the model up is
applied without a person while a client sends requests without pause (none fails); a
commit that removes the model waits for approval; both are in the run history.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from llmgw.apply import hosts_for, wiring
from llmgw.apply.wheelhouse import wheelhouse
from llmgw.controller import Controller
from llmgw.facts.cache import read_facts
from llmgw.site import Site
from llmgw.state import WriteMeta
from llmgw.state.select import backend_for
from tests.support.cli import run_cli
from tests.support.lab import Lab, lab
from tests.support.operators import admin_client
from tests.support.traffic import Hammer

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.postgres]


@pytest.fixture
def site_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    with lab(tmp_path, nodes=2, prefix="llmgw-state") as it:
        it.ok("facts")
        # The routers keep the wheel the test starts with: edits to llmgw/ in a shared checkout
        # during the run would otherwise reinstall and restart them under the client's requests.
        built = wheelhouse()
        monkeypatch.setattr(wiring, "wheelhouse", lambda: built)
        yield it


def point_at(site: Path, state: str) -> None:
    config = site / "llmgw.yaml"
    text = config.read_text()
    assert "state: state.json" in text
    config.write_text(text.replace("state: state.json", f"state: {state}"))


def test_a_second_checkout_refuses_foreign_units_then_shares_the_state(site_a: Lab, tmp_path: Path, pg_state: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    a = site_a
    a.ok("apply", "--auto-approve")
    # Several control hosts applying to one fleet share the engine key secret (the controller too).
    monkeypatch.setenv("LLMGW_ENGINE_KEY_SECRET", (a.site / "llmgw-engine-keys.secret").read_text().strip())
    lineage = a.state.lineage
    running = {n: us for n, us in a.active_units().items() if us}
    assert running, "site A's apply started no shard"
    a.ok("facts")
    seen = {u.name: u.lineage for f in read_facts(Site.load(a.site).facts_dir).values() for u in f.units or []
            if not u.name.startswith("llmgw-router")}
    assert seen and set(seen.values()) == {lineage}, seen  # every unit says whose it is

    b = tmp_path / "site-b"
    shutil.copytree(a.site, b, symlinks=True,
                    ignore=shutil.ignore_patterns("state.json*", ".llmgw", "*.sqlite", "*.secret"))
    assert run_cli("-C", str(b), "facts").exit_code == 0
    refused = run_cli("-C", str(b), "plan")
    assert refused.exit_code == 1
    assert lineage in refused.stderr and "state:" in refused.stderr, refused.stderr
    assert run_cli("-C", str(b), "apply", "--auto-approve").exit_code == 1
    assert {n: us for n, us in a.active_units().items() if us} == running  # nothing destroyed

    moved = a.ok("state", "migrate", "--to", pg_state)
    assert "state:" in moved.stdout
    point_at(a.site, pg_state)
    point_at(b, pg_state)
    same = run_cli("-C", str(b), "plan", "--detailed-exitcode")
    assert same.exit_code == 0 and "No changes" in same.stdout, same.stdout + same.stderr

    # An apply killed after writing a serial and before delivering it: the routers are behind.
    with backend_for(Site.load(a.site)) as backend:
        state = backend.read()
        behind = backend.write(state, expect_serial=state.serial, meta=WriteMeta("apply", author="killed apply"))
    caught_up = run_cli("-C", str(b), "apply", "--auto-approve")
    assert caught_up.exit_code == 0, caught_up.stderr
    assert f"Delivered state serial {behind.serial}" in caught_up.stdout, caught_up.stdout
    quiet = run_cli("-C", str(b), "apply", "--auto-approve")
    assert quiet.exit_code == 0 and "Delivered" not in quiet.stdout and "No changes" in quiet.stdout
    assert {n: us for n, us in a.active_units().items() if us} == running

    controller_follows_the_repository(a, tmp_path)


def controller_follows_the_repository(a: Lab, tmp_path: Path) -> None:
    (a.site / ".gitignore").write_text(".lab/\n.llmgw/\nstate.json*\n*.sqlite\n*.secret\n")
    git(a.site, "init", "-q", "-b", "main")
    git(a.site, "add", "-A")
    git(a.site, "commit", "-q", "-m", "the lab site")
    work = tmp_path / "controller"
    subprocess.run(["git", "clone", "-q", str(a.site), str(work)], check=True, capture_output=True, timeout=60)
    (work / ".lab").symlink_to(a.site / ".lab")  # the lab's SSH key and engine artifacts
    ctl = Controller(work, runtime=tmp_path / "controller-runtime", say=lambda _line: None)
    key = hosts_for(Site.load(a.site)).create_key("controller-lab")["key"]
    hammer = Hammer(openai.OpenAI(base_url=a.router_url + "/v1", api_key=key, max_retries=0, timeout=30), "tiny")
    try:
        ctl.tick()
        assert ctl.runs.all()[0].status == "no-changes", ctl.runs.all()[0].summary
        hammer.start()
        catalog = a.site / "catalog" / "tiny.yaml"
        catalog.write_text(catalog.read_text().replace("scaling: {min: 1,", "scaling: {min: 2,"))
        git(a.site, "commit", "-q", "-am", "tiny: min 2")
        ctl.tick()
        up = ctl.runs.all()[0]
        assert up.status == "applied" and not up.destructive, up.log
        assert sorted(r.state for r in ctl.backend.read().replicas) == ["ready", "ready"]

        catalog.write_text("models: []\n")
        git(a.site, "commit", "-q", "-am", "remove tiny")
        ctl.tick()
        down = ctl.runs.all()[0]
        assert down.status == "waiting" and down.destructive, down.summary
        assert len(ctl.backend.read().replicas) == 2  # nothing removed without a person
        hammer.stop.set()
        hammer.join(60)
        assert hammer.ok > 0 and hammer.failures == [], hammer.failures[:5]

        # An operator approves through the controller's admin API (`llmgw approve` posts the same).
        approved = admin_client(ctl).post(f"/api/v1/runs/{down.id}/approve", json={})
        assert approved.status_code == 200 and approved.json()["approved_by"] == "tester", approved.text
        ctl.tick()
        assert ctl.runs.get(down.id).status == "applied", ctl.runs.get(down.id).log
        assert ctl.backend.read().replicas == []
        listed = json.loads(run_cli("-C", str(work), "controller", "runs", "--json").stdout)["runs"]
        assert [r["status"] for r in listed[:2]] == ["applied", "applied"]
    finally:
        hammer.stop.set()
        ctl.stop()
        ctl.backend.close()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=lab", "-c", "user.email=lab@example.invalid", *args],
                   check=True, capture_output=True, timeout=60)
