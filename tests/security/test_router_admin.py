"""The router's admin listener against a browser and a rebinding name (#32, "Smaller").

It served Swagger and the OpenAPI schema, answered any Host (so a page on a name the
attacker points at 127.0.0.1 could read it), took a cross-site `text/plain` POST to
/api/v1/downloads (what its dashboard shows), and needed no credential for that change;
the role did not assert that it listens on loopback.

A real `RouterServer` with the example site (so the dashboard and its POST are there), over
TCP; the role's own preflight through ansible-runner.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from llmgw.router import RouterServer
from llmgw.runner import run_playbook
from llmgw.site import Site
from llmgw.store import Store
from tests.support.example_site import example_site
from tests.support.router import FAST, serve_in_thread

HERE = Path(__file__).resolve().parent
ROW = {"host": "l40s-01", "name": "w.gguf", "bytes": 1, "total": 2, "rate": 1.0, "eta_seconds": 1.0,
       "replicas": ["m-1"]}


@dataclass
class Admin:
    url: str
    port: int
    token_file: Path
    token: str

    def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(self.url + "/api/v1/downloads", content=body, headers=headers, timeout=30)

    def shown(self) -> list[object]:
        listed: list[object] = httpx.get(self.url + "/api/v1/downloads", timeout=30).json()["downloads"]
        return listed


@pytest.fixture
def admin(tmp_path: Path, sqlite_store: Store) -> Iterator[Admin]:
    root = example_site(tmp_path)
    state = Site.load(root).state_file
    token = "llmgw-admin-" + secrets.token_hex(16)
    token_file = state.with_name("admin.token")
    token_file.write_text(token + "\n")
    server = RouterServer(state_path=state, store=sqlite_store, listen=("127.0.0.1", 0),
                          admin_listen=("127.0.0.1", 0), settings=FAST, site_dir=root, graceful_timeout=5)
    thread, _ = serve_in_thread(server)
    port = server.addresses["admin"][1]
    yield Admin(f"http://127.0.0.1:{port}", port, token_file, token)
    server.stop()
    thread.join(30)


def _json(a: Admin, **extra: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {a.token}", **extra}


BODY = b'{"downloads": [{"host": "l40s-01", "name": "w.gguf", "bytes": 1, "total": 2, "rate": 1.0, ' \
       b'"eta_seconds": 1.0, "replicas": ["m-1"]}]}'


def test_the_admin_listener_serves_no_swagger_or_schema(admin: Admin) -> None:
    for path in ("/api/docs", "/api/openapi.json", "/docs", "/openapi.json", "/redoc"):
        r = httpx.get(admin.url + path, timeout=30)
        assert r.status_code == 404, f"{path}: {r.status_code} {r.text[:120]}"
        assert "swagger" not in r.text.lower() and '"openapi"' not in r.text


@pytest.mark.parametrize(("headers", "with_token"), [
    # what any web page can send without a CORS preflight: a "simple" request
    ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, False),
    ({"Content-Type": "text/plain"}, False),
    ({"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}, False),
    # with the token too (a page cannot have it, but each check stands on its own)
    ({"Content-Type": "application/json", "Origin": "http://evil.example"}, True),
    ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, True),
    ({"Content-Type": "application/json", "Origin": "http://rebind.attacker.example:8001"}, True),
    ({"Content-Type": "text/plain;charset=UTF-8"}, True),
], ids=["text-plain-evil-origin", "text-plain", "form-cross-site", "json-evil-origin", "json-cross-site",
        "json-rebound-origin", "text-plain-with-token"])
def test_a_cross_site_post_is_refused(admin: Admin, headers: dict[str, str], with_token: bool) -> None:
    sent = {**headers, "Authorization": f"Bearer {admin.token}"} if with_token else headers
    r = admin.post(BODY, sent)
    assert r.status_code in (401, 403, 415), f"{headers}: {r.status_code} {r.text[:200]}"
    assert r.json()["error"]["message"]
    assert admin.shown() == []  # nothing changed on the dashboard


@pytest.mark.parametrize("host", ["rebind.attacker.example", "rebind.attacker.example:8001", "localhost.evil",
                                  "127.0.0.1.nip.io"])
def test_a_rebound_host_is_refused_and_the_listeners_own_answered(admin: Admin, host: str) -> None:
    for path in ("/api/v1/usage", "/api/v1/status", "/"):
        r = httpx.get(admin.url + path, headers={"Host": host}, timeout=120)
        assert r.status_code == 403, f"GET {path} Host {host}: {r.status_code}"
        assert r.json()["error"]["code"] == "host_not_allowed"
    r = admin.post(BODY, _json(admin, Host=host))
    assert r.status_code == 403 and admin.shown() == []
    # By address, any port (a tunnel's local one), the API and the dashboard answer.
    for own in (f"127.0.0.1:{admin.port}", f"localhost:{admin.port}", "127.0.0.1:40123", "[::1]:8001"):
        r = httpx.get(admin.url + "/api/v1/status", headers={"Host": own}, timeout=30)
        assert r.status_code == 200, f"Host {own}: {r.status_code} {r.text[:200]}"
    assert httpx.get(admin.url + "/", timeout=120).status_code == 200  # the read-only dashboard


def test_a_change_needs_the_admin_token(admin: Admin) -> None:
    json_only = {"Content-Type": "application/json"}
    r = admin.post(BODY, json_only)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_admin_token"
    r = admin.post(BODY, {**json_only, "Authorization": "Bearer llmgw-admin-guessed"})
    assert r.status_code == 401
    assert admin.shown() == []
    r = admin.post(BODY, {**json_only, "Authorization": f"Bearer {admin.token}",
                          "Origin": admin.url, "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 204, r.text
    assert admin.shown() == [ROW]
    admin.token_file.unlink()  # no token file: the admin API changes nothing at all
    r = admin.post(b'{"downloads": [], "done": true}', {**json_only, "Authorization": f"Bearer {admin.token}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_token_missing"
    assert "admin.token" in r.json()["error"]["message"]
    assert admin.shown() == [ROW]


def test_the_role_refuses_an_admin_listener_off_loopback(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    wheelhouse = tmp_path / "wheelhouse.tar"
    wheelhouse.write_bytes(b"not really wheels: the preflight only looks at it")

    def preflight(listen: str) -> tuple[bool, str]:
        result = run_playbook(HERE / "router_preflight.yml", inv,
                              extravars={"llmgw_router_wheelhouse": str(wheelhouse),
                                         "llmgw_router_admin_listen": listen})
        return result.ok, "\n".join(result.output_tail)

    for listen in ("0.0.0.0:8001", "10.0.0.5:8001", "[::]:8001", "router.example:8001"):
        ok, out = preflight(listen)
        assert not ok, f"the role's preflight took llmgw_router_admin_listen={listen}"
        assert "llmgw_router_admin_listen must be a loopback address" in out, out
    for listen in ("127.0.0.1:8001", "[::1]:8001", "localhost:8001"):
        ok, out = preflight(listen)
        assert ok, out
