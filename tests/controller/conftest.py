"""The controller's tests use the state tests' PostgreSQL fixtures (a fresh schema per test)."""

from tests.state.conftest import pg_admin, pg_state

__all__ = ["pg_admin", "pg_state"]
