"""Load reports are authenticated per router (issue #32): a real `llmgw controller run` process
with its routers' demand API on loopback, attacked by router r1 (holding its own token, as
apply delivers it) speaking for router r2, and flooding the controller's memory.

Before the fix every router held one shared token, the router named in the body was taken
as given (a forged idle report for a router that was down stopped a model), and each
(router, process) pair was kept for a minute at up to 4 MiB."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmgw.apply.controller_token import router_token_for
from llmgw.apply.engine_keys import SECRET_ENV
from tests.controller.support import NEW
from tests.support.net import free_port
from tests.support.waiting import stop_process, wait_until

ROUTERS = ("all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n    llmgw_routers:\n      hosts:\n"
           "        r1: {}\n        r2: {}\n")


@dataclass
class Demand:
    admin: str
    demand: str
    state_file: Path
    proc: subprocess.Popen[bytes]

    def token(self, router: str) -> str:
        return router_token_for(self.state_file, router)

    def report(self, router: str, body: dict[str, Any] | bytes) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(f"{self.demand}/api/v1/demand/report", content=content, timeout=60,
                          headers={"Authorization": f"Bearer {self.token(router)}",
                                   "Content-Type": "application/json"})

    def view(self) -> dict[str, Any]:
        got = httpx.get(f"{self.admin}/api/v1/demand", timeout=10).json()
        assert isinstance(got, dict)
        return got

    def rss(self) -> int:
        """The controller process's resident memory, bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


@pytest.fixture
def controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Demand]:
    site = tmp_path / "site"
    (site / "catalog").mkdir(parents=True)
    (site / "llmgw.yaml").write_text("inventory: hosts.yml\nstate: state.json\n")
    (site / "hosts.yml").write_text(ROUTERS)
    (site / "catalog" / "new.yaml").write_text(NEW)
    monkeypatch.setenv(SECRET_ENV, secrets.token_hex(32))  # the site's engine key secret, the controller's too
    monkeypatch.setenv("LLMGW_CONTROLLER_HOME", str(tmp_path / "controller-home"))
    admin, demand = free_port(), free_port()
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "llmgw"), "-C", str(site), "controller", "run", "--no-follow",
             "--listen", f"127.0.0.1:{admin}", "--demand-listen", f"127.0.0.1:{demand}", "--demand-interval", "0.2"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ))
    it = Demand(f"http://127.0.0.1:{admin}", f"http://127.0.0.1:{demand}", site / "state.json", proc)

    def routers_read() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the controller exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return it.view()["routers"] == ["r1", "r2"]
        except httpx.HTTPError:
            return False

    try:
        wait_until(routers_read, 60, "the controller to read its routers from the inventory")
        yield it
    finally:
        stop_process(proc, 15)


def test_a_report_in_another_router_s_name_is_refused(controller: Demand) -> None:
    # r2 is down; r1 says, in r2's name, that nobody has used model new for a day.
    forged = {"router": "r2", "process": "1", "replicas": {}, "waiting": {}, "model_idle_s": {"new": 86400.0}}
    answer = controller.report("r1", forged)
    assert answer.status_code == 403, answer.text
    assert "r1" in answer.json()["detail"]
    # r1's own report counts, under the name its token carries (the body need not say it);
    # r2's silence still means "not known", so nothing is scaled down or stopped.
    assert controller.report("r1", {"process": "1", "replicas": {}}).status_code == 200
    wait_until(lambda: controller.view()["routers_not_known"] == ["r2"], 30, "r1 to be known from its own report")
    # A token the site's secret made for a router the inventory does not have is refused too.
    assert controller.report("r9", {"process": "1"}).status_code == 403


def test_one_router_s_reports_are_bounded_in_memory(controller: Demand) -> None:
    # Reports near the 4 MiB body limit, each from a "new process" of r1: before the fix every
    # one was kept for 60 s.
    replicas = {f"{'x' * 180}-{i}": {"in_flight": 0, "idle_s": 1.0} for i in range(16_000)}
    assert controller.report("r1", {"router": "r1", "process": "warm-up", "replicas": replicas}).status_code == 200
    before = controller.rss()
    for n in range(24):
        body = json.dumps({"router": "r1", "process": f"p{n}", "replicas": replicas}).encode()
        assert 3 * 1024 * 1024 < len(body) < 4 * 1024 * 1024
        answer = controller.report("r1", body)
        assert answer.status_code == 200, answer.text
    grown = controller.rss() - before
    print(f"the controller grew by {grown / 2**20:.0f} MiB for 24 reports of {len(body) / 2**20:.1f} MiB")
    # 24 reports of 3.5 MiB (about 6 MiB each once parsed) kept would be about 150 MiB; the
    # controller keeps at most 8 MiB of one router's report bodies.
    assert grown < 64 * 1024 * 1024, f"the controller grew by {grown / 2**20:.0f} MiB"
