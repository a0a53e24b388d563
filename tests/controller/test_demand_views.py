"""`llmgw models` shows the controller's last scale decision per model and activations in flight,
from the run history beside the state (what any bastion sees)."""

from __future__ import annotations

import json
from pathlib import Path

from llmgw.controller import runs_for
from llmgw.site import Site
from llmgw.state.select import backend_for
from llmgw.views.demand import demand_view
from tests.controller.test_demand_api import make_site
from tests.support.cli import run_cli


def test_the_newest_decision_per_model_and_activations_in_flight() -> None:
    runs = [  # newest first, as the run store lists them
        {"id": 4, "status": "applying", "summary": "demand: activate new 0 -> 1 replicas: a router asked for it",
         "updated_at": "t4"},
        {"id": 3, "status": "applied", "summary": "demand: scale-up old 1 -> 2 replicas: 5 in flight/waiting over "
                                                  "1 replica(s), target 2 per replica", "updated_at": "t3"},
        {"id": 2, "status": "applied", "summary": "demand: stop-idle new 1 -> 0 replicas: no request on any router "
                                                  "for 60 s", "updated_at": "t2"},
        {"id": 1, "status": "applied", "summary": "1 to add, 0 to change, 0 to destroy"},
    ]
    view = demand_view(runs)
    assert view["activating"] == ["new"]
    assert view["models"]["old"] == {"kind": "scale-up", "current": 1, "desired": 2, "run": 3, "status": "applied",
                                     "reason": "5 in flight/waiting over 1 replica(s), target 2 per replica",
                                     "at": "t3"}
    assert view["models"]["new"]["kind"] == "activate"  # the newest one


def test_llmgw_models_prints_them(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    with backend_for(Site.load(site)) as backend:
        runs_for(backend).add("", "applied", "demand: activate new 0 -> 1 replicas: 3 request(s) waiting", False,
                              "", "test")
    shown = run_cli("-C", str(site), "models", "--no-router")
    assert shown.exit_code == 0, shown.stderr
    text = " ".join(shown.stdout.split())  # the table folds long lines
    assert "new: 0 -> 1 replicas, activate (run 1, applied" in text and "3 request(s) waiting" in text
    as_json = json.loads(run_cli("-C", str(site), "models", "--no-router", "--json").stdout)
    assert as_json["demand"]["models"]["new"]["desired"] == 1 and as_json["demand"]["error"] is None
