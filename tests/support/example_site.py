"""The example site (inventories/example) copied into a temp folder, with a state.

The example site has no state file (it is git-ignored), so the views would show no
replicas. `example_site(..., state=True)` writes the state `llmgw apply` would leave
after applying the example's plan in full, with fixed creation times, one replica still
starting and one draining, so every status word and replica state shows up.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from llmgw.site import Site
from llmgw.state import read_state, write_state
from llmgw.views.planned import load_site_data, view_plan

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example"
FIXTURES = REPO / "tests" / "fixtures" / "ibnetdiscover"
NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
CREATED = NOW - timedelta(hours=2)  # after the recorded facts (05:40), so no unit counts as gone


def example_site(tmp: Path, *, state: bool = True) -> Path:
    root = tmp / "example"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("state.json", "state.json.lock", "*.sqlite"))
    if state:
        site = Site.load(root)
        applied = view_plan(load_site_data(site))[0].applied(read_state(site.state_file))
        replicas = []
        for r in applied.replicas:
            update: dict[str, object] = {"created_at": CREATED}
            if r.id == "qwen2.5-coder-14b-1":
                update = {"created_at": NOW - timedelta(minutes=4), "state": "starting"}
            replicas.append(r.model_copy(update=update))
        write_state(site.state_file, applied.model_copy(update={"replicas": replicas}))
    return root


def ready_example_site(tmp: Path) -> Path:
    """The example site with its plan applied in full and every replica ready (created at CREATED):
    what an operator has after a good apply, for the answers each command gives then."""
    root = example_site(tmp, state=False)
    site = Site.load(root)
    applied = view_plan(load_site_data(site))[0].applied(read_state(site.state_file))
    write_state(site.state_file, applied.model_copy(update={
        "replicas": [r.model_copy(update={"created_at": CREATED}) for r in applied.replicas]}))
    return root
