"""Two site checkouts and one fleet, on real lab hosts.

Site A applies (units carry its state's lineage). Site B, a second checkout without A's
state file, plans against the same hosts: it refuses, naming the lineage it found, and
nothing is destroyed. A's state moves to PostgreSQL and both point at it: B plans
"No changes". Then a serial written but never delivered (an apply killed between the two)
reaches the router with the next apply, although the plan has no changes; the apply after
that contacts no host.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.facts.cache import read_facts
from llmgw.site import Site
from llmgw.state import WriteMeta, backend_for
from tests.support.cli import run_cli
from tests.support.lab import Lab, lab

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.postgres]


@pytest.fixture
def site_a(tmp_path: Path) -> Iterator[Lab]:
    with lab(tmp_path, nodes=2, prefix="llmgw-state") as it:
        it.ok("facts")
        yield it


def point_at(site: Path, state: str) -> None:
    config = site / "llmgw.yaml"
    text = config.read_text()
    assert "state: state.json" in text
    config.write_text(text.replace("state: state.json", f"state: {state}"))


def test_a_second_checkout_refuses_foreign_units_then_shares_the_state(site_a: Lab, tmp_path: Path,
                                                                      pg_state: str) -> None:
    a = site_a
    a.ok("apply", "--auto-approve")
    lineage = a.state.lineage
    running = {n: us for n, us in a.active_units().items() if us}
    assert running, "site A's apply started no shard"
    a.ok("facts")
    seen = {u.name: u.lineage for f in read_facts(Site.load(a.site).facts_dir).values() for u in f.units or []
            if not u.name.startswith("llmgw-router")}
    assert seen and set(seen.values()) == {lineage}, seen  # every unit says whose it is

    b = tmp_path / "site-b"
    shutil.copytree(a.site, b, ignore=shutil.ignore_patterns("state.json*", ".llmgw", "*.sqlite"))
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
