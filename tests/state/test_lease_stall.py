"""A lock holder that stalls past its lease (#14: the shared-state lab lost both the state lock
and the controller's lease during an approved removal under load): when nobody took the lease
meanwhile it is still the holder's, and the holder's next write and renewal extend it; when
another took it, the stalled holder writes nothing."""

from __future__ import annotations

import os

import psycopg
import pytest

from llmgw.errors import StateError
from llmgw.state import PostgresBackend, State
from tests.support.waiting import wait_until

pytestmark = pytest.mark.postgres


def lapse(url: str, password: str, name: str) -> None:
    """What a stalled holder finds: its lease ran out (no renewal came in time)."""
    with psycopg.connect(url, password=password, autocommit=True) as conn:
        conn.execute("UPDATE llmgw_locks SET expires_at = now() - interval '1 second' WHERE name = %s", (name,))


def test_a_lapsed_lease_nobody_took_is_kept_by_the_next_write_and_renewal(pg_state: str) -> None:
    password = os.environ["LLMGW_STATE_PASSWORD"]
    with PostgresBackend(pg_state, password=password, lease=30) as a, PostgresBackend(pg_state, password=password,
                                                                                    lease=30) as b:
        with a.lock("apply") as held:
            lapse(pg_state, password, "state")
            assert b.lock_info() is None  # lapsed: anyone could take it now
            assert a.write(State(lineage=""), expect_serial=0).serial == 1  # still ours: extended
            now = b.lock_info()
            assert now is not None and now.id == held.id
        with a.lease_on("controller", "controller") as lead:
            lapse(pg_state, password, "controller")
            # The heartbeat (every lease/6 = 5 s) finds it lapsed but still ours, and extends it.
            holder = wait_until(lambda: b.lease_holder("controller"), 15, "the renewal to extend the lapsed lease")
            assert holder.id == lead.id
            assert a.lease_lost("controller") is None


def test_a_lapsed_lease_another_took_is_lost_and_nothing_is_written(pg_state: str) -> None:
    password = os.environ["LLMGW_STATE_PASSWORD"]
    with PostgresBackend(pg_state, password=password, lease=30) as a, PostgresBackend(pg_state, password=password,
                                                                                    lease=30) as b, a.lock("apply"):
        lapse(pg_state, password, "state")
        with b.lock("apply"):
            with pytest.raises(StateError, match="lost its lock"):
                a.write(State(lineage=""), expect_serial=0)
            assert b.write(State(lineage=""), expect_serial=0).serial == 1
