"""Idle means idle, against a real router process: `llmgw status` after a router (re)start.

The example's replicas were created days ago and never used. Before #35, ten seconds after
a router started `status` listed every one as "never used in 2d": it counted from the
replica's creation, not from when a router began watching it. The scaler's definition
(llmgw.idle) is now the view's too: idle only once a router has watched it that long.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmgw.router import RouterServer, RouterSettings
from llmgw.site import Site
from llmgw.state import Replica, read_state, write_state
from llmgw.store import open_store
from tests.support.cli import run_cli
from tests.support.example_site import example_site
from tests.support.router import HTTP
from tests.support.waiting import wait_until

READY = ["deepseek-v3-1", "llama-3.1-70b-1", "llama-3.1-70b-2"]


class Routers:
    """Start and restart a real router on the site's state (engines on a closed loopback port)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server: RouterServer | None = None
        self.thread: threading.Thread | None = None
        self.store = open_store(f"sqlite:///{root / 'store.sqlite'}")

    def start(self) -> str:
        import uvloop

        server = RouterServer(state_path=Site.load(self.root).state_file, store=self.store,
                              listen=("127.0.0.1", 0), admin_listen=("127.0.0.1", 0), graceful_timeout=2,
                              settings=RouterSettings(health_interval=0.2, health_timeout=0.5,
                                                      state_poll_interval=0.2))
        self.thread = threading.Thread(target=lambda: uvloop.run(server.run()), daemon=True)
        self.thread.start()
        assert server.started.wait(30)
        self.server = server
        host, port = server.addresses["admin"]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.stop()
            self.thread.join(15)
            assert not self.thread.is_alive(), "router did not stop"
            self.server = None


@pytest.fixture
def routers(tmp_path: Path) -> Iterator[Routers]:
    root = example_site(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    site = Site.load(root)
    state = read_state(site.state_file)
    write_state(site.state_file, state.model_copy(update={"replicas": [
        Replica.model_validate({**r.model_dump(), "endpoint": f"http://127.0.0.1:{closed}",
                                "shards": [{**s.model_dump(), "port": closed} if s.rank == 0 else s.model_dump()
                                           for s in r.shards]})
        for r in state.replicas]}))
    r = Routers(root)
    try:
        yield r
    finally:
        r.stop()
        r.store.close()


def status(root: Path, admin: str, idle_after: str) -> tuple[list[str], dict[str, Any]]:
    text = run_cli("-C", str(root), "status", "--router", admin, "--idle-after", idle_after)
    assert text.exit_code == 0, text.stderr
    data = run_cli("-C", str(root), "status", "--json", "--router", admin, "--idle-after", idle_after)
    return text.stdout.splitlines(), json.loads(data.stdout)


def watched(admin: str) -> dict[str, float]:
    reps = HTTP.get(admin + "/api/v1/replicas", timeout=10).json()["replicas"]
    return {r["id"]: r["watched_seconds"] for r in reps if r["id"] in READY}


def test_status_after_a_router_restart_says_not_known_yet(routers: Routers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    admin = routers.start()
    unknown = ("Idle replicas (no request for 1h): none; not known yet for 3 (no router has watched them for 1h): "
               + ", ".join(READY))
    lines, view = status(routers.root, admin, "3600")
    assert unknown in lines
    assert view["idle"] == [] and [i["id"] for i in view["idle_not_known"]] == READY
    # Once the router has watched them for the whole window, they are idle, by the same definition.
    wait_until(lambda: len(w := watched(admin)) == 3 and min(w.values()) >= 1, 30, "the router watching 1 s")
    lines, view = status(routers.root, admin, "1")
    assert [(i["id"], i["used"]) for i in view["idle"]] == [(r, False) for r in READY]
    assert view["idle_not_known"] == []
    assert "Idle replicas (no request for 1s): 3" in lines
    assert any(ln.startswith("  deepseek-v3-1  (deepseek-v3)  never used in the ") and
               ln.endswith(" routers have watched it") for ln in lines), lines
    # A restart starts the count again: nothing is nominated for eviction by it.
    routers.stop()
    admin = routers.start()
    lines, view = status(routers.root, admin, "3600")
    assert unknown in lines
    assert view["idle"] == [] and [i["id"] for i in view["idle_not_known"]] == READY
