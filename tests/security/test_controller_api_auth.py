"""Approval is authenticated (issue #32): a real `llmgw controller run` process follows a real
git repository and holds a run waiting for approval; its admin API, over TCP on loopback, is
attacked as a web page, a DNS-rebound name and a client without the operators' token would.

Before the fix the API answered 200 to each (and `llmgw approve` wrote the runs store itself,
recording whatever `$LLMGW_AUTHOR` said as the approver)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controller.support import EMPTY, NEW, clone, commit, seed_applied, site_repo
from tests.support.cli import run_cli
from tests.support.net import free_port
from tests.support.waiting import stop_process, wait_until


@dataclass
class Waiting:
    """A controller with run `run` waiting for approval; its admin API at `url`."""

    url: str
    run: int
    work: Path
    home: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def get(self, run: int) -> dict[str, Any]:
        got = httpx.get(f"{self.url}/api/v1/runs/{run}", timeout=10).json()
        assert isinstance(got, dict)
        return got

    def auth(self) -> dict[str, str]:
        """The operators' token, as the group that may read it has it (none where there is none)."""
        path = self.home / "operator.token"
        return {"Authorization": f"Bearer {path.read_text().strip()}"} if path.exists() else {}

    def approve(self, headers: dict[str, str], **kw: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/api/v1/runs/{self.run}/approve", headers=headers, timeout=10, **kw)

    def still_waiting(self) -> None:
        run = self.get(self.run)
        assert (run["status"], run["approved_by"]) == ("waiting", None), run


@pytest.fixture
def waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Waiting]:
    repo = site_repo(tmp_path, "state.json")
    work = clone(repo, tmp_path / "work")
    runtime = tmp_path / "runtime"
    seed_applied(work, runtime)
    commit(repo, {"catalog/new.yaml": NEW, "catalog/old.yaml": None, "hosts.yml": EMPTY},
           "old and n1 replaced by on-demand new: destroys old-1, so it waits for approval")
    home = tmp_path / "controller-home"
    monkeypatch.setenv("LLMGW_CONTROLLER_HOME", str(home))
    port = free_port()
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "llmgw"), "-C", str(work), "controller", "run", "--interval", "0.3",
             "--listen", f"127.0.0.1:{port}", "--runtime-dir", str(runtime)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"

    def waiting_run() -> int | None:
        if proc.poll() is not None:
            raise AssertionError(f"the controller exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            runs = httpx.get(f"{url}/api/v1/runs", timeout=5).json()["runs"]
        except httpx.HTTPError:
            return None
        return next((r["id"] for r in runs if r["status"] == "waiting"), None)

    try:
        run = wait_until(waiting_run, 60, "the destructive commit's run to wait for approval")
        yield Waiting(url, run, work, home, log, proc)
    finally:
        stop_process(proc, 15)


def test_a_cross_site_text_plain_post_does_not_approve(waiting: Waiting) -> None:
    # What a page on evil.example can make a browser send to 127.0.0.1 without a preflight.
    answer = waiting.approve({"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site",
                              "Content-Type": "text/plain"}, content=b"{}")
    assert answer.status_code in (401, 403, 415), answer.text
    # Even with the operators' token (a page cannot read it, but say it could replay one).
    answer = waiting.approve({"Origin": "http://evil.example", "Content-Type": "application/json",
                              **waiting.auth()}, content=b"{}")
    assert answer.status_code == 403 and "cross-origin" in answer.json()["detail"], answer.text
    answer = waiting.approve({"Content-Type": "text/plain", **waiting.auth()}, content=b"{}")
    assert answer.status_code == 415, answer.text
    waiting.still_waiting()


def test_a_dns_rebound_host_is_refused(waiting: Waiting) -> None:
    # rebind.attacker.example resolves to 127.0.0.1 by then: the request reaches the listener
    # with the attacker's name in Host, from the attacker's own origin.
    answer = waiting.approve({"Host": "rebind.attacker.example", "Content-Type": "application/json",
                              **waiting.auth()}, content=b"{}")
    assert answer.status_code == 421, answer.text
    read = httpx.get(f"{waiting.url}/api/v1/runs/{waiting.run}", headers={"Host": "rebind.attacker.example:80"},
                     timeout=10)
    assert read.status_code == 421  # nor can the rebound page read the plans
    waiting.still_waiting()


def test_no_token_or_a_wrong_one_is_refused(waiting: Waiting) -> None:
    assert waiting.approve({}, json={}).status_code == 401
    forged = "llmgw-operator.operators." + "0" * 64
    answer = waiting.approve({"Authorization": f"Bearer {forged}"}, json={})
    assert answer.status_code == 401 and answer.headers.get("www-authenticate") == "Bearer", answer.text
    waiting.still_waiting()


def test_approve_records_the_token_s_operator_not_llmgw_author(waiting: Waiting,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_AUTHOR", "alice@bastion")  # what anyone may claim
    monkeypatch.setenv("LLMGW_CONTROLLER_ADMIN", waiting.url)
    done = run_cli("-C", str(waiting.work), "approve", str(waiting.run))
    assert done.exit_code == 0, done.stderr
    run = waiting.get(waiting.run)
    assert run["approved_by"] == "operators" and run["status"] in ("approved", "applying", "applied"), run
    assert "as operators" in done.stdout
    token = waiting.home / "operator.token"  # made on the controller's first start, for its operators only
    assert token.stat().st_mode & 0o007 == 0 and (waiting.home / "operator.secret").stat().st_mode & 0o077 == 0
    # Without the token file the CLI cannot approve at all (it no longer writes the store).
    monkeypatch.setenv("LLMGW_OPERATOR_TOKEN_FILE", str(waiting.home / "nothing-here"))
    refused = run_cli("-C", str(waiting.work), "approve", str(waiting.run))
    assert refused.exit_code == 1 and "no operator token" in refused.stderr, refused
