"""The routers' demand API over TLS: a real `llmgw controller run --demand-tls-cert/--demand-tls-key`
process, and the router's real client (llmgw.router.activator), which verifies the controller's
certificate against the CA it is given and sends its token only inside the TLS channel."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from pathlib import Path

import aiohttp
import httpx
import pytest

from llmgw.apply.controller_token import router_token_for
from llmgw.apply.engine_keys import SECRET_ENV
from llmgw.router.activator import ControllerClient
from tests.controller.support import NEW
from tests.support.net import free_port
from tests.support.waiting import stop_process, wait_until

ROUTERS = ("all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n    llmgw_routers:\n      hosts:\n"
           "        r1: {}\n        r2: {}\n")


def self_signed(where: Path) -> tuple[Path, Path]:
    cert, key = where / "controller.pem", where / "controller.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=llmgw controller", "-addext",
                    "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_routers_report_over_tls_and_verify_the_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "catalog").mkdir(parents=True)
    (site / "llmgw.yaml").write_text("inventory: hosts.yml\nstate: state.json\n")
    (site / "hosts.yml").write_text(ROUTERS)
    (site / "catalog" / "new.yaml").write_text(NEW)
    monkeypatch.setenv(SECRET_ENV, secrets.token_hex(32))
    cert, key = self_signed(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    other, _ = self_signed(tmp_path / "elsewhere")
    admin, demand = free_port(), free_port()
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "llmgw"), "-C", str(site), "controller", "run", "--no-follow",
             "--listen", f"127.0.0.1:{admin}", "--demand-listen", f"127.0.0.1:{demand}",
             "--demand-tls-cert", str(cert), "--demand-tls-key", str(key), "--demand-interval", "0.2"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ))
    token_file = tmp_path / "controller.token"
    token_file.write_text(router_token_for(site / "state.json", "r1") + "\n")

    def view() -> dict[str, object] | None:
        if proc.poll() is not None:
            raise AssertionError(f"the controller exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            got = httpx.get(f"http://127.0.0.1:{admin}/api/v1/demand", timeout=5).json()
        except httpx.HTTPError:
            return None
        return got if isinstance(got, dict) and got.get("routers") else None

    async def report(client: ControllerClient) -> None:
        try:
            await client.report({"process": "1", "replicas": {}})
        finally:
            await client.session.close()

    try:
        wait_until(view, 60, "the controller's demand API")
        url = f"https://127.0.0.1:{demand}"
        asyncio.run(report(ControllerClient(url, token_file, "r1", ca_file=cert)))
        wait_until(lambda: (v := view()) is not None and v["routers_not_known"] == ["r2"], 30,
                   "r1's report over TLS to count")
        # A certificate the router was not told to trust (a man in the middle's): refused.
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            asyncio.run(report(ControllerClient(url, token_file, "r1", ca_file=other)))
        with pytest.raises(aiohttp.ClientError):  # nor does the listener speak plain HTTP
            asyncio.run(report(ControllerClient(f"http://127.0.0.1:{demand}", token_file, "r1")))
    finally:
        stop_process(proc, 15)


def test_the_router_refuses_a_controller_url_carrying_credentials(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from llmgw.errors import UsageError
    from llmgw.router.activator import factory

    monkeypatch.setenv("LLMGW_CONTROLLER_URL", "https://r1:llmgw-router.r1.abc@10.0.0.5:8096")
    with pytest.raises(UsageError, match="must not carry credentials"):
        factory(state_path=tmp_path / "state.json")
    monkeypatch.setenv("LLMGW_CONTROLLER_URL", "https://10.0.0.5:8096")
    monkeypatch.setenv("LLMGW_ROUTER_NAME", "r1")
    client = factory(state_path=tmp_path / "state.json")
    assert (client.url, client.name) == ("https://10.0.0.5:8096", "r1")
    assert client.token_file == tmp_path / "controller.token"
