"""The routers' state followers get a read-only PostgreSQL role (issue #32), against the real
PostgreSQL: `llmgw state grant-follower ROLE` (run as the controller's role, which owns the
tables) leaves ROLE able to follow the state and unable to approve or insert a controller
run, take the controller's lease or write a serial.

Before the fix there was no such role: the followers connected as the controller's own
role (llmgw_router_state_follow_url defaulted to the state's URL), so a compromised router
could approve or insert runs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from llmgw.controller.runs import PgRuns
from llmgw.errors import StateError
from llmgw.site import Site
from llmgw.state import PostgresBackend, State, WriteMeta
from llmgw.state.select import backend_for
from tests.support.cli import run_cli

pytestmark = pytest.mark.postgres

PASSWORD = "follower-" + uuid.uuid4().hex


@pytest.fixture
def follower(pg_admin: str, pg_state: str) -> Iterator[str]:
    """A login role of its own, dropped after the test (its rights in the test's schema first)."""
    role = "f_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        try:
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        except psycopg.errors.InsufficientPrivilege:
            pytest.fail("the test role may not create roles: run scripts/start-postgres (it grants CREATEROLE)",
                        pytrace=False)
    yield role
    schema = pg_state.rsplit("search_path%3D", 1)[1]
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}")
        conn.execute(f"REVOKE ALL ON SCHEMA {schema} FROM {role}")
        conn.execute(f"DROP ROLE {role}")


def as_role(state_url: str, role: str) -> str:
    parts = urlsplit(state_url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))


def test_the_follower_role_reads_the_state_and_writes_nothing(tmp_path: Path, pg_state: str, follower: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "llmgw.yaml").write_text(f"state: {pg_state}\n")
    with backend_for(Site.load(site)) as owner:  # the controller's role: a serial and a waiting run
        written = owner.write(State(lineage=""), expect_serial=0, meta=WriteMeta("seed"))
        waiting = PgRuns(owner).add("0" * 40, "waiting", "Plan: 0 to add, 0 to change, 1 to destroy.", True, "{}",
                                    "controller")

    granted = run_cli("-C", str(site), "state", "grant-follower", follower)
    assert granted.exit_code == 0, granted.stderr

    reader = PostgresBackend(as_role(pg_state, follower), password=PASSWORD)
    try:
        assert reader.read().serial == written.serial  # following works: read, and LISTEN below
        seen: list[int] = []
        stop = threading.Event()
        t = threading.Thread(target=reader.follow, args=(lambda s: (seen.append(s.serial), stop.set()), stop),
                             kwargs={"poll": 1.0}, daemon=True)
        t.start()
        t.join(30)
        assert seen == [written.serial]
        with pytest.raises(StateError, match="permission denied"):
            PgRuns(reader, create=False).approve(waiting.id, "mallory")
        with pytest.raises(StateError, match="permission denied"):
            PgRuns(reader, create=False).add("f" * 40, "approved", "injected", False, "{}", "controller")
        with pytest.raises(StateError, match="permission denied"):
            PgRuns(reader, create=False).all()  # the runs are not the routers' to read either
        with pytest.raises(StateError, match="permission denied"):
            reader.write(written, expect_serial=written.serial, meta=WriteMeta("router"))
        from llmgw.state.roles import writable  # what `state follow` warns about: nothing here

        with reader.transaction() as cur:
            assert writable(cur) == []
    finally:
        reader.close()
    with psycopg.connect(as_role(pg_state, follower), password=PASSWORD, autocommit=True) as conn:
        for stmt in ("UPDATE llmgw_state_head SET serial = serial + 1",
                     "INSERT INTO llmgw_locks VALUES ('controller', 'x', 'router', 'x', now(), now() + interval '1h')",
                     "DELETE FROM llmgw_state_serials",
                     "UPDATE llmgw_controller_runs SET status = 'approved'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)
    with backend_for(Site.load(site)) as owner:
        assert PgRuns(owner).get(waiting.id).status == "waiting" and owner.read().serial == written.serial
        with owner.transaction() as cur:
            assert "llmgw_controller_runs" in writable(cur)  # the controller's role: never the routers'


def test_the_grants_are_printed_for_an_administrator(tmp_path: Path, pg_state: str, follower: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "llmgw.yaml").write_text(f"state: {pg_state}\n")
    shown = run_cli("-C", str(site), "state", "grant-follower", follower, "--print")
    assert shown.exit_code == 0, shown.stderr
    schema = pg_state.rsplit("search_path%3D", 1)[1]
    assert f"GRANT SELECT ON {schema}.llmgw_state_head, {schema}.llmgw_state_serials TO {follower};" in shown.stdout
    assert "llmgw_controller_runs" in shown.stdout.split("GRANT")[0]  # revoked, never granted
    bad = run_cli("-C", str(site), "state", "grant-follower", "x; DROP TABLE llmgw_state_head")
    assert bad.exit_code == 1 and "not a plain PostgreSQL name" in bad.stderr
