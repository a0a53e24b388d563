"""The admin API's guard, in-process (the attacks themselves, against a real controller process,
are tests/security/test_controller_api_auth.py): which Host, Origin and bodies pass."""

from __future__ import annotations

from pathlib import Path

from llmgw.controller import Controller
from llmgw.controller.api import listener_names
from tests.controller.test_demand_api import make_site
from tests.support.operators import admin_client


def test_names_ports_origins_and_bodies(tmp_path: Path) -> None:
    ctl = Controller(make_site(tmp_path / "site"), branch=None, say=lambda _l: None)
    api = admin_client(ctl)
    assert listener_names("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert listener_names("10.0.0.5") == {"10.0.0.5"}
    # Through an SSH tunnel's local port: the name is what counts, not the port.
    assert api.get("/api/v1/runs", headers={"Host": "localhost:9000"}).status_code == 200
    assert api.get("/api/v1/runs", headers={"Host": "[::1]:9000"}).status_code == 200
    for rebound in ("rebind.attacker.example", "rebind.attacker.example:8095", "127.0.0.1.attacker.example", ""):
        assert api.get("/api/v1/runs", headers={"Host": rebound}).status_code == 421, rebound
    # A same-origin post gets past the guard (run 7 does not exist: 409 says why).
    same = api.post("/api/v1/runs/7/approve", json={},
                    headers={"Host": "localhost:9000", "Origin": "http://localhost:9000",
                             "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 409 and "no controller run 7" in same.json()["detail"]
    for origin, site in (("http://localhost:3000", None), ("null", None), (None, "same-site"), (None, "cross-site")):
        headers = {"Host": "localhost:9000", **({"Origin": origin} if origin else {}),
                   **({"Sec-Fetch-Site": site} if site else {})}
        assert api.post("/api/v1/runs/7/approve", json={}, headers=headers).status_code == 403, (origin, site)
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
        refused = api.post("/api/v1/runs/7/approve", content=b"{}", headers={"Content-Type": media})
        assert refused.status_code == 415, media
    assert api.post("/api/v1/runs/7/approve", content=b"[]",
                    headers={"Content-Type": "application/json"}).status_code == 400
    assert api.post("/api/v1/runs/7/approve", content=b"x" * 70_000,
                    headers={"Content-Type": "application/json"}).status_code == 413
