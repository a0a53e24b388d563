"""State test fixtures: a fresh PostgreSQL schema per test, reached without a password in the URL.

`pg_state` is a `postgresql://user@host/db?options=-csearch_path=...` URL (no password:
llmgw refuses one in a URL); the password travels in $LLMGW_STATE_PASSWORD, as an
operator's would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.postgres import server_url


@pytest.fixture(scope="session")
def pg_admin() -> str:
    """The PostgreSQL that scripts/start-postgres runs (started here if down), as a URL with password."""
    return server_url()


def without_password(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = netloc[-1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host)), parts.password or ""


@pytest.fixture
def pg_state(pg_admin: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh schema as a state URL without a password; the password is in the environment."""
    import psycopg

    schema = "s_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url, password = without_password(pg_admin)
    monkeypatch.setenv("LLMGW_STATE_PASSWORD", password)
    sep = "&" if "?" in url else "?"
    yield f"{url}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
