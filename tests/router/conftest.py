"""Router test fixtures: real llama-server processes, real routers on loopback, real stores.

- `engines(...)` starts the real llama.cpp server with the tiny model on a free port;
  a missing binary FAILS the test, saying how to build it.
- `state` writes the state file the router reads (the same write_state apply uses).
- `start_router(...)` runs `RouterServer` (the object `llmgw router serve` runs) in a
  thread with its own event loop, on port 0, and hands back its addresses.
- `pg_url` is a fresh schema in the PostgreSQL that scripts/start-postgres runs.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmgw.router import RouterServer, RouterSettings
from llmgw.router.ondemand import Activator
from llmgw.store import Store, open_store
from tests.support.postgres import server_url
from tests.support.router import (
    FAST,
    HTTP,
    Engine,
    RunningRouter,
    StateFile,
    close_clients,
    require_engine,
    serve_in_thread,
    start_engine,
)


@pytest.fixture(autouse=True)
def _close_http_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture(autouse=True, scope="session")
def _close_shared_http() -> Iterator[None]:
    yield
    HTTP.close()


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """engines(name, parallel=4, ctx=4096, extra=[]) -> a running llama-server."""
    require_engine()
    started: list[Engine] = []

    def start(name: str = "e", *, parallel: int = 4, ctx: int = 4096, extra: tuple[str, ...] = (),
              port: int | None = None) -> Engine:
        eng = start_engine(tmp_path, name, parallel=parallel, ctx=ctx, extra=extra, port=port)
        started.append(eng)
        return eng

    yield start
    for e in started:
        e.kill()


# -- state --------------------------------------------------------------------------------
@pytest.fixture
def state(tmp_path: Path) -> StateFile:
    return StateFile(tmp_path / "state.json")


# -- stores -------------------------------------------------------------------------------
@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite://{tmp_path / 'store.sqlite'}")
    yield s
    s.close()


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The PostgreSQL the test command starts (scripts/start-postgres); started here if down."""
    return server_url()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh schema in the test database, as a store URL (search_path set through options)."""
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in pg_server else "?"
    yield f"{pg_server}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


# -- routers ------------------------------------------------------------------------------
@pytest.fixture
def start_router(sqlite_store: Store) -> Iterator[Callable[..., RunningRouter]]:
    running: list[RunningRouter] = []

    def start(state_path: Path, *, store: Store | None = None, settings: RouterSettings = FAST,
              activator: Activator | None = None, metrics: bool = False,
              site_dir: Path | None = None) -> RunningRouter:
        server = RouterServer(state_path=state_path, store=store or sqlite_store, listen=("127.0.0.1", 0),
                              admin_listen=("127.0.0.1", 0),
                              metrics_listen=("127.0.0.1", 0) if metrics else None, site_dir=site_dir,
                              settings=settings, activator=activator, graceful_timeout=5)
        thread, errors = serve_in_thread(server)
        rr = RunningRouter(server, thread, store or sqlite_store, errors)
        running.append(rr)
        return rr

    yield start
    for rr in running:
        with contextlib.suppress(AssertionError):
            rr.stop()


@pytest.fixture
def api_key(sqlite_store: Store) -> str:
    return sqlite_store.create_key("tester")[1]

