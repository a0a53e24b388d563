"""#14 leftover: `llmgw status` on a fresh checkout (empty state) while hosts run llmgw units.

`plan` refuses (it would destroy units of another state); a view destroys nothing, so it
shows the fleet anyway and says the state is empty and why plan refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.example_site import example_site


def test_status_on_an_empty_state_shows_the_fleet_and_says_the_state_is_empty(tmp_path: Path) -> None:
    site = example_site(tmp_path, state=False)
    facts_file = site / "facts" / "a100-node-01.json"
    doc = json.loads(facts_file.read_text())
    doc["units"] = [{"name": "llmgw-llama-3.1-70b-1-0.service", "active_state": "active", "lineage": "theirs"}]
    facts_file.write_text(json.dumps(doc))
    refused = run_cli("-C", str(site), "plan")
    assert refused.exit_code == 1 and "the state is empty" in refused.stderr  # what plan says, unchanged

    r = run_cli("-C", str(site), "status", "--json", "--no-router")
    assert r.exit_code == 0, r.stderr
    view = json.loads(r.stdout)
    assert view["serial"] == 0 and view["replicas"]["total"] == 0
    assert {c["gpu_class"] for c in view["capacity"]} == {"A100-40GB", "H100-80GB", "H200-141GB", "L40S-48GB"}
    assert [u["model"] for u in view["unplaceable"]] == ["grok-1", "llama-3.1-405b", "llama-4-maverick"]
    assert any("the state is empty (serial 0" in n for n in view["notes"])
    assert any("theirs" in n and "refusing to plan" in n and "llmgw state import" in n for n in view["notes"])
    text = run_cli("-C", str(site), "status", "--no-router")
    assert text.exit_code == 0 and "the state is empty" in text.stdout
    for verb in ("models", "replicas"):
        assert run_cli("-C", str(site), verb, "--no-router").exit_code == 0
