"""The controller's demand API as routers use it: each router's own token, load reports,
activation requests; and what `GET /api/v1/demand` says when a model cannot be placed (no
host is contacted)."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from llmgw.apply.controller_token import router_of, router_token_for
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.controller import Controller
from llmgw.controller.api import demand_app
from llmgw.site import Site
from tests.controller.support import NEW
from tests.support.operators import admin_client

ROUTERS = "all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n    llmgw_routers:\n      hosts:\n        r1: {}\n"


def make_site(root: Path) -> Path:
    (root / "catalog").mkdir(parents=True)
    (root / "llmgw.yaml").write_text("inventory: hosts.yml\nstate: state.json\n")
    (root / "hosts.yml").write_text(ROUTERS)
    (root / "catalog" / "new.yaml").write_text(NEW.replace("scaling: {min: 0, max: 1}",
                                                           "scaling: {min: 0, max: 1, activation_timeout: 45s}"))
    return root


def test_routers_need_the_token_and_their_reports_are_checked(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    ctl = Controller(site, branch=None, say=lambda _l: None)
    state_file = Site.load(site).state_file
    keyring = EngineKeyring.beside(state_file)
    token = router_token_for(state_file, "r1")
    assert token.startswith("llmgw-router.r1.") and token == router_token_for(state_file, "r1")
    assert router_of(keyring, token) == "r1" and router_of(keyring, token.replace(".r1.", ".r2.")) is None
    assert router_token_for(state_file, "r2") != token
    api = TestClient(demand_app(ctl, keyring))
    report = {"router": "r1", "process": "7", "replicas": {}, "waiting": {}, "model_idle_s": {}}
    assert api.post("/api/v1/demand/report", json=report).status_code == 401
    assert api.post("/api/v1/demand/report", json=report, headers={"Authorization": "Bearer nope"}).status_code == 401
    auth = {"Authorization": f"Bearer {token}"}
    bad = api.post("/api/v1/demand/report", json={**report, "waiting": {"new": -2}}, headers=auth)
    assert bad.status_code == 400 and "waiting.new" in bad.json()["detail"]
    assert api.post("/api/v1/demand/report", content=b"{", headers=auth).status_code == 400
    assert api.post("/api/v1/demand/report", json=report, headers=auth).json() == {"ok": True}
    assert [r.router for r in ctl.scaler.reports.fresh(time.monotonic())] == ["r1"]
    assert api.post("/api/v1/demand/activate", json={"model": 3}, headers=auth).status_code == 400


def test_an_activation_that_cannot_be_placed_is_refused_with_the_reason(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    ctl = Controller(site, branch=None, say=lambda _l: None)
    state_file = Site.load(site).state_file
    token = router_token_for(state_file, "r1")
    routers = TestClient(demand_app(ctl, EngineKeyring.beside(state_file)))
    admin = admin_client(ctl)
    auth = {"Authorization": f"Bearer {token}"}
    ctl.demand_tick()  # reads the catalog: the model's hold bound
    asks = [routers.post("/api/v1/demand/activate", json={"model": "new"}, headers=auth).json() for _ in range(5)]
    assert [a["status"] for a in asks] == ["pending"] * 5 and asks[0]["hold_s"] == 45
    assert [a["model"] for a in admin.get("/api/v1/demand").json()["activations"]] == ["new"]
    ctl.demand_tick()  # no node in the inventory: nothing can take it
    answer = routers.post("/api/v1/demand/activate", json={"model": "new"}, headers=auth).json()
    assert answer["status"] == "failed" and "cannot place more of new" in answer["reason"], answer
    view = admin.get("/api/v1/demand").json()
    assert view["routers"] == ["r1"] and view["routers_not_known"] == ["r1"]
    assert view["models"]["new"]["last_decision"].startswith("activate refused: cannot place more of new")
    assert view["activations"] == []
    assert ctl.runs.all() == []  # nothing was applied
    routers.post("/api/v1/demand/activate", json={"model": "nosuch"}, headers=auth)
    ctl.demand_tick()
    unknown = routers.post("/api/v1/demand/activate", json={"model": "nosuch"}, headers=auth).json()
    assert unknown["status"] == "failed" and unknown["reason"] == "nosuch is not a model in the catalog"
