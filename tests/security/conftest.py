"""Security tests attack the real parts: the router tests' fixtures (real llama-server,
real routers on loopback, SQLite and PostgreSQL stores) are used here as they are."""

from tests.router.conftest import (  # noqa: F401 - fixtures, found by pytest under these names
    _close_http_clients,
    _close_shared_http,
    api_key,
    engines,
    pg_server,
    pg_url,
    sqlite_store,
    start_router,
    state,
)
from tests.state.conftest import pg_admin, pg_state  # noqa: F401 - a fresh PostgreSQL schema per test
