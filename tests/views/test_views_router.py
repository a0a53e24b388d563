"""The CLI views with a real router answering on its admin listener (loopback only)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.router import RouterServer, RouterSettings
from llmgw.site import Site
from llmgw.state import Replica, read_state, write_state
from llmgw.store import open_store
from tests.support.cli import run_cli
from tests.support.example_site import example_site
from tests.support.router import HTTP
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    import uvloop

    root = example_site(tmp_path_factory.mktemp("routed"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    site = Site.load(root)
    state = read_state(site.state_file)  # every engine on a closed loopback port: nothing leaves the host
    # (the state's schema holds an endpoint to its rank-0 shard's port: that port moves too)
    write_state(site.state_file, state.model_copy(update={"replicas": [
        Replica.model_validate({**r.model_dump(), "endpoint": f"http://127.0.0.1:{closed}",
                                "shards": [{**s.model_dump(), "port": closed} if s.rank == 0 else s.model_dump()
                                           for s in r.shards]})
        for r in state.replicas]}))
    store = open_store(f"sqlite:///{root / 'store.sqlite'}")
    server = RouterServer(state_path=site.state_file, store=store, listen=("127.0.0.1", 0),
                          admin_listen=("127.0.0.1", 0), graceful_timeout=2,
                          settings=RouterSettings(health_interval=0.2, health_timeout=0.5, state_poll_interval=0.2))
    thread = threading.Thread(target=lambda: uvloop.run(server.run()), daemon=True)
    thread.start()
    assert server.started.wait(30)
    host, port = server.addresses["admin"]
    try:
        yield root, f"http://{host}:{port}"
    finally:
        server.stop()
        thread.join(15)
        store.close()


def test_replicas_carry_the_routers_view(routed: tuple[Path, str]) -> None:
    root, admin = routed
    r = run_cli("-C", str(root), "replicas", "--json", "--router", admin)
    assert r.exit_code == 0, r.stderr
    recs = {x["id"]: x for x in json.loads(r.stdout)["replicas"]}
    assert recs["deepseek-v3-1"]["used"] is False and recs["deepseek-v3-1"]["in_flight"] == 0
    r = run_cli("-C", str(root), "replicas", "--router", admin)
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("deepseek-v3-1 "))
    assert row.split()[5] == "-"  # known: never used


def test_status_names_idle_replicas(routed: tuple[Path, str]) -> None:
    root, admin = routed
    # Idle for a second only once the router has watched them that long (llmgw.idle).
    wait_until(lambda: all(x["watched_seconds"] >= 1 for x in HTTP.get(admin + "/api/v1/replicas").json()["replicas"]),
               30, "the router watching its replicas for 1 s")
    r = run_cli("-C", str(root), "status", "--json", "--router", admin, "--idle-after", "1")
    view = json.loads(r.stdout)
    assert view["routers"] == [admin]
    # Ready and never used for more than a second; the coder replica is still starting.
    assert [(i["id"], i["used"]) for i in view["idle"]] == [
        ("deepseek-v3-1", False), ("llama-3.1-70b-1", False), ("llama-3.1-70b-2", False)]
    r = run_cli("-C", str(root), "status", "--router", admin, "--idle-after", "1")
    assert "Idle replicas (no request for 1s): 3" in r.stdout
    assert "  deepseek-v3-1  (deepseek-v3)  never used in " in r.stdout
