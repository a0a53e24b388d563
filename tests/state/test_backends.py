"""The state backends: compare-and-set writes, push refusals, locks that name their holder,
and on PostgreSQL every serial with its author and a lease that outlives a dead holder only
until it runs out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.errors import StateError
from llmgw.state import LocalBackend, PostgresBackend, Replica, Shard, State, StateBackend, WriteMeta
from llmgw.state.local import read_state
from llmgw.state.select import open_backend
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def replica(rid: str) -> Replica:
    return Replica(id=rid, model="m", profile="cpu", engine="llamacpp", state="ready", endpoint="http://n1:20000",
                   shards=[Shard(node="n1", rank=0, port=20000, unit=f"llmgw-{rid}-0.service")])


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateBackend]:
    if request.param == "local":
        b: StateBackend = LocalBackend(tmp_path / "state.json")
    else:
        b = open_backend(request.getfixturevalue("pg_state"), root=tmp_path)
    yield b
    b.close()


def test_writes_are_compare_and_set(backend: StateBackend) -> None:
    empty = backend.read()
    assert empty.serial == 0 and empty.lineage == ""
    first = backend.write(State(lineage="", replicas=[replica("m-1")]), expect_serial=0)
    assert first.serial == 1 and first.lineage
    assert backend.read() == first
    second = backend.write(first.model_copy(update={"replicas": []}), expect_serial=1)
    assert second.serial == 2 and second.lineage == first.lineage
    with pytest.raises(StateError, match="serial 2, expected 1"):
        backend.write(first, expect_serial=1)  # made from serial 1: someone wrote since
    with pytest.raises(StateError, match="lineage"):
        backend.write(State(lineage="another-fleet"), expect_serial=2)
    assert backend.read() == second


def test_push_refuses_an_older_serial_or_another_lineage_unless_forced(backend: StateBackend) -> None:
    s1 = backend.write(State(lineage="", replicas=[replica("m-1")]), expect_serial=0)
    s2 = backend.write(s1.model_copy(update={"replicas": [replica("m-1"), replica("m-2")]}), expect_serial=1)
    with pytest.raises(StateError, match="serial 1 is not newer than serial 2") as refused:
        backend.push(s1)
    said = "\n".join(refused.value.detail)
    assert "m-2" in said and "--force" in said  # what forcing would lose
    foreign = State(lineage="other", serial=9)
    with pytest.raises(StateError, match="lineage other"):
        backend.push(foreign)
    assert backend.read() == s2  # nothing written by a refusal
    forced = backend.push(s1, force=True)
    assert forced.serial == 3 and [r.id for r in forced.replicas] == ["m-1"]
    assert backend.push(forced) == forced  # the same state again is no change
    newer = forced.model_copy(update={"serial": 10, "replicas": []})
    assert backend.push(newer).serial == 10  # a newer serial keeps its number


def test_a_second_locker_is_refused_naming_the_holder(backend: StateBackend, tmp_path: Path) -> None:
    with backend.lock("apply") as held:
        assert backend.lock_info() is not None
        other = LocalBackend(tmp_path / "state.json") if isinstance(backend, LocalBackend) else \
            open_backend(backend.where, root=tmp_path)
        with pytest.raises(StateError, match="locked by") as refused, other.lock("apply"):
            pass
        other.close()
        assert held.holder in refused.value.message and "apply" in refused.value.message
    assert backend.lock_info() is None


# -- PostgreSQL only ------------------------------------------------------------------------

pg = pytest.mark.postgres


@pg
def test_every_serial_is_kept_with_its_author(pg_state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_backend(pg_state, root=tmp_path) as b:
        s = b.write(State(lineage=""), expect_serial=0, meta=WriteMeta("apply", author="alice@bastion-a",
                                                                       plan="abc123", git_commit="f00d"))
        monkeypatch.setenv("LLMGW_AUTHOR", "ci run 42")
        s = b.write(s.model_copy(update={"replicas": [replica("m-1")]}), expect_serial=1)
        history = b.history()
        assert [(r.serial, r.author, r.operation) for r in history] == [(1, "alice@bastion-a", "apply"),
                                                                         (2, "ci run 42", "apply")]
        assert history[0].plan == "abc123" and history[0].git_commit == "f00d" and history[0].written_at
        assert b.read_serial(1).replicas == [] and b.read_serial(2) == s
        with pytest.raises(StateError, match="no serial 7"):
            b.read_serial(7)


@pg
def test_two_writers_from_the_same_serial_one_wins(pg_state: str, tmp_path: Path) -> None:
    with open_backend(pg_state, root=tmp_path) as a, open_backend(pg_state, root=tmp_path) as b:
        base = a.write(State(lineage=""), expect_serial=0)
        a.write(base.model_copy(update={"replicas": [replica("a-1")]}), expect_serial=1)
        with pytest.raises(StateError, match="moved on"):
            b.write(base.model_copy(update={"replicas": [replica("b-1")]}), expect_serial=1)
        assert [r.id for r in b.read().replicas] == ["a-1"]


@pg
def test_a_write_while_another_holds_the_lock_is_refused(pg_state: str, tmp_path: Path) -> None:
    with open_backend(pg_state, root=tmp_path) as a, open_backend(pg_state, root=tmp_path) as b:
        with a.lock("apply") as held:
            with pytest.raises(StateError, match="locked by"):
                b.write(State(lineage=""), expect_serial=0)
            assert a.write(State(lineage=""), expect_serial=0).serial == 1
            assert b.unlock(held.id).holder == held.holder  # broken by an operator...
            with pytest.raises(StateError, match="lost its lock"):
                a.write(State(lineage=""), expect_serial=1)  # ...so the old holder can no longer write
        assert b.read().serial == 1


HOLDER = """
import sys
from pathlib import Path
from llmgw.state.select import open_backend

backend = open_backend(sys.argv[1], root=Path("."))
with backend.lock("apply") as info:
    print(info.id, flush=True)
    sys.stdin.read()  # hold until killed
"""


@pg
def test_a_killed_holder_keeps_the_lock_only_until_its_lease_ends(pg_state: str, tmp_path: Path) -> None:
    lease = 3.0
    env = {**os.environ, "LLMGW_STATE_LEASE": str(lease), "LLMGW_AUTHOR": "holder-site-a"}
    with subprocess.Popen([sys.executable, "-c", HOLDER, pg_state], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env=env, cwd=REPO) as proc:
        try:
            assert proc.stdout is not None
            lock_id = proc.stdout.readline().strip()
            assert lock_id, "the holder did not take the lock"
            with open_backend(pg_state, root=tmp_path) as b:
                seen = b.lock_info()
                assert seen is not None and seen.id == lock_id and "holder-site-a" in seen.holder
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                after_kill = b.lock_info()  # dead, but its lease still runs: still locked
                assert after_kill is not None and after_kill.id == lock_id and after_kill.expires_at is not None
                with pytest.raises(StateError, match="holder-site-a"), b.lock("apply"):
                    pass

                def take() -> object:
                    try:
                        with b.lock("apply") as mine:
                            return mine
                    except StateError:
                        return None

                mine = wait_until(take, 4 * lease, "the dead holder's lease to run out")
                assert isinstance(mine.acquired_at, type(after_kill.expires_at))  # type: ignore[attr-defined]
                assert mine.acquired_at >= after_kill.expires_at  # type: ignore[attr-defined]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pg
def test_a_live_holder_keeps_its_lease_beyond_one_period(pg_state: str, tmp_path: Path) -> None:
    with PostgresBackend(pg_state, password=os.environ["LLMGW_STATE_PASSWORD"], lease=0.6) as a, \
            open_backend(pg_state, root=tmp_path) as b, a.lock("apply") as held:
        first = b.lock_info()
        assert first is not None and first.expires_at is not None

        def renewed() -> bool:
            now = b.lock_info()
            return now is not None and now.expires_at is not None and now.expires_at > first.expires_at

        wait_until(renewed, 5, "the holder to renew its lease")
        assert a.write(State(lineage=""), expect_serial=0).serial == 1
        assert held.id == b.lock_info().id  # type: ignore[union-attr]


def test_a_password_in_the_url_is_refused_without_repeating_it(tmp_path: Path) -> None:
    for url in ("postgresql://llmgw:s3cret-pw@db/llmgw", "postgresql://llmgw@db/llmgw?password=s3cret-pw"):
        with pytest.raises(StateError) as refused:
            open_backend(url, root=tmp_path, where="llmgw.yaml:3")
        said = refused.value.message + (refused.value.hint or "")
        assert "llmgw.yaml:3" in said and "password" in said and "LLMGW_STATE_PASSWORD" in said
        assert "s3cret-pw" not in said


@pg
def test_the_password_can_come_from_a_file(pg_state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "pw"
    secret.write_text(os.environ["LLMGW_STATE_PASSWORD"] + "\n")
    monkeypatch.delenv("LLMGW_STATE_PASSWORD")
    monkeypatch.setenv("LLMGW_STATE_PASSWORD_FILE", str(secret))
    with open_backend(pg_state, root=tmp_path) as b:
        assert b.read().serial == 0
    monkeypatch.setenv("LLMGW_STATE_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(StateError, match="LLMGW_STATE_PASSWORD_FILE"):
        open_backend(pg_state, root=tmp_path)


def test_each_version_of_a_local_state_file_is_parsed_once(tmp_path: Path) -> None:
    # `llmgw status` and the dashboard read the state through several paths in one process.
    path = tmp_path / "state.json"
    first = LocalBackend(path).write(State(lineage="", replicas=[replica("m-1")]), expect_serial=0)
    assert read_state(path) is read_state(path) is LocalBackend(path).read()
    assert read_state(path) == first
    second = LocalBackend(path).write(first.model_copy(update={"replicas": []}), expect_serial=1)
    parsed = read_state(path)
    assert parsed.serial == 2 and parsed == second  # a rename: a new file
    # Edited in place (the same inode): its size changed, so it is parsed again.
    text = path.read_text()
    path.write_text(text.replace('"replicas": []', '"replicas": [ ]'))
    again = read_state(path)
    assert again == second and again is not parsed
    path.write_text("{not json")
    with pytest.raises(StateError):
        read_state(path)
