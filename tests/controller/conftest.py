"""The controller's tests use the state tests' PostgreSQL fixtures (a fresh schema per test),
and give every controller they start a home of its own (its operator secret and token)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.controller.operators import HOME_ENV
from tests.state.conftest import pg_admin, pg_state

__all__ = ["controller_home", "pg_admin", "pg_state"]


@pytest.fixture(autouse=True)
def controller_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """$LLMGW_CONTROLLER_HOME for this test (and the `llmgw controller run` processes it starts)."""
    home = tmp_path / "controller-home"
    monkeypatch.setenv(HOME_ENV, str(home))
    yield home
