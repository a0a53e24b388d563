"""The key, quota and usage store: SQLite embedded by default, PostgreSQL for fleets.

`open_store(url)` accepts `sqlite:///path` (the path is always absolute: any number of
slashes after `sqlite:` lead to `/`) and `postgresql://user:pass@host:port/db`.
Which URL a command uses: `--store URL`, else `$LLMGW_STORE`, else the site's
`store:` in llmgw.yaml (default: `llmgw-store.sqlite` beside the state file), else,
outside a site, `$XDG_DATA_HOME/llmgw/store.sqlite` (`~/.local/share/llmgw/store.sqlite`).
"""

from __future__ import annotations

import os
from pathlib import Path

from llmgw.errors import StoreError
from llmgw.store.model import (
    BenchRecord,
    CheckRecord,
    GroupLimit,
    GroupRecord,
    KeyRecord,
    MinuteCount,
    Refusal,
    UsageDelta,
    UsageRow,
)
from llmgw.store.sql import UNSET, PostgresStore, SqliteStore, SqlStore, Unset
from llmgw.store.urls import redact_url, url_scheme

Store = SqlStore

__all__ = [
    "UNSET",
    "BenchRecord",
    "CheckRecord",
    "GroupLimit",
    "GroupRecord",
    "KeyRecord",
    "MinuteCount",
    "PostgresStore",
    "Refusal",
    "SqlStore",
    "SqliteStore",
    "Store",
    "Unset",
    "UsageDelta",
    "UsageRow",
    "default_store_url",
    "open_store",
    "redact_url",
    "sqlite_path",
    "url_scheme",
]


def default_store_url() -> str:
    """Where keys live when no site and no --store say otherwise."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite://{Path(data) / 'llmgw' / 'store.sqlite'}"


def sqlite_path(url: str) -> Path | None:
    """The file a `sqlite:` store URL names (None for another scheme); opening it creates it."""
    if not url.startswith("sqlite:"):
        return None
    rest = url[len("sqlite:"):].lstrip("/")
    if not rest:
        raise StoreError(f"store URL {url!r} names no file", hint="use sqlite:///path/to/store.sqlite")
    return Path("/" + rest)


def open_store(url: str) -> Store:
    path = sqlite_path(url)
    if path is not None:
        return SqliteStore(url, path)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    # Only the scheme: a mistyped scheme must not echo the password that follows it.
    raise StoreError(f"unknown store URL scheme {url_scheme(url)!r} (in {redact_url(url)})",
                     hint="use sqlite:///path/to/store.sqlite or postgresql://user:pass@host/db")
