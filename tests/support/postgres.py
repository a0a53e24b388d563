"""The test PostgreSQL (scripts/start-postgres, which `make test` runs), reached or started once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PG_DEFAULT = "postgresql://llmgw:llmgw@127.0.0.1:5432/llmgw_test"


def _problem(url: str) -> str | None:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as exc:
        return str(exc)
    return None


def server_url() -> str:
    """The admin URL of the test database ($LLMGW_TEST_PG), starting the server if it is down."""
    url = os.environ.get("LLMGW_TEST_PG", PG_DEFAULT)
    if _problem(url) is not None:
        subprocess.run([str(REPO / "scripts" / "start-postgres")], check=False, capture_output=True)
    problem = _problem(url)
    if problem is not None:
        pytest.fail(f"PostgreSQL at {url} is not reachable ({problem.strip()}): run scripts/start-postgres "
                    "(scripts/setup-host installs and starts it)", pytrace=False)
    return url
