"""A router's state file follows a PostgreSQL state through LISTEN/NOTIFY, and keeps the last
good copy while the follower's connection is gone."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from llmgw.state import PostgresBackend, State
from llmgw.state.select import open_backend
from llmgw.yamlio import atomic_write
from tests.support.waiting import wait_until

pytestmark = pytest.mark.postgres


def serial_in(path: Path) -> int:
    try:
        return int(json.loads(path.read_text())["serial"])
    except (OSError, ValueError):
        return 0


def test_notify_delivers_each_serial_and_an_outage_keeps_the_last_copy(pg_state: str, pg_admin: str,
                                                                      tmp_path: Path) -> None:
    import psycopg

    out = tmp_path / "router" / "state.json"
    with open_backend(pg_state, root=tmp_path) as writer, open_backend(pg_state, root=tmp_path) as follower:
        assert isinstance(follower, PostgresBackend)
        stop = threading.Event()
        # poll 60 s: anything seen sooner came through NOTIFY
        thread = threading.Thread(target=follower.follow, args=(lambda s: atomic_write(out, s.to_json()), stop),
                                  kwargs={"poll": 60.0, "retry": 0.2}, daemon=True)
        thread.start()
        try:
            s = writer.write(State(lineage=""), expect_serial=0)
            wait_until(lambda: serial_in(out) == 1, 10, "serial 1 in the router's file")
            s = writer.write(s, expect_serial=1)
            wait_until(lambda: serial_in(out) == 2, 10, "serial 2 through NOTIFY")

            def cut() -> int:
                with psycopg.connect(pg_admin, autocommit=True) as admin:
                    rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                         "query = 'LISTEN llmgw_state' AND pid <> pg_backend_pid() AND "
                                         "current_setting('search_path') IS NOT NULL").fetchall()
                return len(rows)

            assert wait_until(cut, 10, "the follower's LISTEN connection to exist") >= 1
            assert serial_in(out) == 2  # the last good copy stays
            writer.write(s, expect_serial=2)
            wait_until(lambda: serial_in(out) == 3, 15, "the follower to reconnect and catch up")
        finally:
            stop.set()
            thread.join(10)
        assert not thread.is_alive()
