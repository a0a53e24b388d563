"""What a state backend offers beyond its core, asked for by capability (llmgw.state.capabilities),
and the routers' deliveries apply keeps beside the state (llmgw.apply.delivery)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest

from llmgw.apply import deliveries_for
from llmgw.controller.runs import FileRuns, PgRuns, runs_for
from llmgw.errors import StateError
from llmgw.state import (
    Database,
    FileBacked,
    Follow,
    Leases,
    LocalBackend,
    LockInfo,
    SerialRecord,
    State,
    StateBackend,
    WriteMeta,
    offers,
    require,
)
from llmgw.state.select import open_backend
from tests.support.cli import run_cli

CAPABILITIES = (Leases, Follow, Database, FileBacked)


class MemoryBackend(StateBackend):
    """A third backend: the core only, in memory, to show callers ask for capabilities, not classes."""

    where = "memory"

    def __init__(self) -> None:
        self.state = State()

    def read(self) -> State:
        return self.state

    def _store(self, state: State, *, expect_serial: int, expect_lineage: str | None, meta: WriteMeta,
               new_serial: int | None = None) -> State:
        self.state = state.model_copy(update={"serial": max(expect_serial + 1, new_serial or 0),
                                              "lineage": state.lineage or "mem"})
        return self.state

    def lock(self, operation: str) -> AbstractContextManager[LockInfo]:
        return nullcontext(LockInfo("1", "me", operation, None, None))

    def lock_info(self) -> LockInfo | None:
        return None

    def unlock(self, lock_id: str) -> LockInfo:
        raise StateError("not locked")

    def history(self) -> list[SerialRecord]:
        return []

    def close(self) -> None:
        pass


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateBackend]:
    if request.param == "local":
        b: StateBackend = LocalBackend(tmp_path / "state.json")
    else:
        b = open_backend(request.getfixturevalue("pg_state"), root=tmp_path)
    yield b
    b.close()


def test_each_backend_offers_what_it_can(backend: StateBackend) -> None:
    offered = {c for c in CAPABILITIES if offers(backend, c) is not None}
    if isinstance(backend, LocalBackend):
        assert offered == {FileBacked}
    else:
        assert offered == {Leases, Follow, Database}
    assert offers(MemoryBackend(), Leases) is None
    assert all(offers(MemoryBackend(), c) is None for c in CAPABILITIES)


def test_a_missing_capability_says_which_state_has_it(tmp_path: Path) -> None:
    local = LocalBackend(tmp_path / "state.json")
    with pytest.raises(StateError) as lacking:
        require(local, Leases, to="run two controllers")
    assert lacking.value.message == f"the local state file {local.where} has no leases"
    assert lacking.value.hint == \
        "use a PostgreSQL state (`state: postgresql://...` in llmgw.yaml) to run two controllers"
    with pytest.raises(StateError, match="the state at memory has no file on this machine") as no_file:
        require(MemoryBackend(), FileBacked, to="keep runs in a file")
    assert no_file.value.hint is not None and "local state file" in no_file.value.hint
    assert require(local, FileBacked, to="x") is local


def test_runs_live_where_the_backend_can_keep_them(backend: StateBackend) -> None:
    runs = runs_for(backend)
    assert isinstance(runs, FileRuns if offers(backend, FileBacked) else PgRuns)
    with pytest.raises(StateError, match="cannot keep runs beside the state at memory") as refused:
        runs_for(MemoryBackend())
    assert refused.value.hint is not None and "state:" in refused.value.hint


def test_deliveries_are_kept_beside_the_state_for_its_lineage(backend: StateBackend) -> None:
    deliveries = deliveries_for(backend)
    assert deliveries.delivered() == {}
    assert deliveries.routers_behind(["r1", "r2"], 0) == []
    first = backend.write(State(lineage=""), expect_serial=0)
    assert deliveries.routers_behind(["r1", "r2"], first.serial) == ["r1", "r2"]  # nothing known: all behind
    deliveries.mark_delivered(["r1"], first.serial)
    assert deliveries.delivered() == {"r1": first.serial}
    assert deliveries.routers_behind(["r1", "r2"], first.serial) == ["r2"]
    second = backend.write(first, expect_serial=first.serial)
    assert deliveries.routers_behind(["r1", "r2"], second.serial) == ["r1", "r2"]
    assert deliveries_for(backend).delivered() == {"r1": first.serial}  # kept, not in memory


def test_a_local_files_deliveries_count_only_for_its_lineage(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "state.json")
    first = backend.write(State(lineage=""), expect_serial=0)
    deliveries_for(backend).mark_delivered(["r1"], first.serial)
    assert (tmp_path / "state.json.routers").is_file()
    backend.push(State(lineage="other", serial=5), force=True)  # another fleet's history: what routers hold is unknown
    assert deliveries_for(backend).delivered() == {}


def test_deliveries_need_a_place_beside_the_state() -> None:
    with pytest.raises(StateError, match="cannot record router deliveries beside the state at memory"):
        deliveries_for(MemoryBackend())


def test_following_a_local_state_says_to_use_postgresql(tmp_path: Path) -> None:
    (tmp_path / "catalog").mkdir()
    (tmp_path / "llmgw.yaml").write_text("inventory: hosts.yml\nstate: state.json\n")
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n")
    result = run_cli("-C", str(tmp_path), "state", "follow", "--out", str(tmp_path / "copy.json"))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "has no notifications of new serials to follow" in result.stderr
    assert "use a PostgreSQL state (`state: postgresql://...` in llmgw.yaml) to follow it" in result.stderr
    assert not (tmp_path / "copy.json").exists()
