"""`llmgw router serve` as a real process: listeners, state reload, metrics listener, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.net import free_port
from tests.support.router import CLIENTS, HTTP, Engine, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine


def test_serve_routes_reloads_and_stops_on_sigterm(tmp_path: Path, engines: Callable[..., Engine],
                                                   state: StateFile) -> None:
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    store = f"sqlite:///{tmp_path}/store.sqlite"
    made = subprocess.run([sys.executable, "-c", "from llmgw.cli import main; main()", "keys", "create", "svc",
                           "--store", store, "--json"], capture_output=True, text=True, check=True)
    key = json.loads(made.stdout)["key"]
    client_port, admin_port, metrics_port = free_port(), free_port(), free_port()
    log = (tmp_path / "router.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from llmgw.cli import main; main()", "router", "serve", "--state", str(state.path),
         "--listen", f"127.0.0.1:{client_port}", "--admin-listen", f":{admin_port}",
         "--metrics-listen", f"127.0.0.1:{metrics_port}", "--store", store, "--health-interval", "0.5"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        admin = f"http://127.0.0.1:{admin_port}"

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "router.log").read_text()
            try:
                return HTTP.get(admin + "/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, 30, "llmgw router serve to listen")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{client_port}/v1", api_key=key, max_retries=0)
        CLIENTS.append(client)
        assert client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=2).choices
        # A new state file is picked up without a restart.
        state.write([model("tiny"), model("other", aliases=("o",))],
                    [replica("tiny-0", "tiny", e.endpoint), replica("other-0", "other", e.endpoint)])
        wait_until(lambda: [m.id for m in client.models.list()] == ["other", "tiny"], 10, "the reload")
        assert client.chat.completions.create(model="o", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=2).choices
        # The admin API answers for the whole router: the lowest serial any worker routes by,
        # so it reaches 2 once every worker has read the new state.
        wait_until(lambda: HTTP.get(admin + "/api/v1/status").json()["serial"] == 2, 10, "every worker's reload")
        status = HTTP.get(admin + "/api/v1/status").json()
        assert status["serial"] == 2 and status["state_error"] is None and status["keys"] == 1
        # A broken state file is reported and ignored: routing goes on by the last good one.
        state.path.write_text("{not json")
        wait_until(lambda: HTTP.get(admin + "/api/v1/status").json()["state_error"], 10, "the bad state report")
        assert [m.id for m in client.models.list()] == ["other", "tiny"]
        metrics = HTTP.get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert metrics.status_code == 200 and 'llmgw_requests_total{model="other",status="200"} 1.0' in metrics.text
        assert HTTP.get(f"http://127.0.0.1:{metrics_port}/api/v1/replicas").status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_serve_needs_a_state_outside_a_site(tmp_path: Path) -> None:
    from tests.support.cli import run_cli

    r = run_cli("-C", str(tmp_path), "router", "serve", "--listen", "127.0.0.1:0")
    assert r.exit_code == 2 and "no --state given and no site" in r.stderr


def test_serve_refuses_a_bad_address(tmp_path: Path) -> None:
    from tests.support.cli import run_cli

    r = run_cli("router", "serve", "--state", str(tmp_path / "s.json"), "--listen", "nowhere:port",
                "--store", f"sqlite:///{tmp_path}/s.sqlite")
    assert r.exit_code == 2 and "cannot read the address" in r.stderr
