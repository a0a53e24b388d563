"""PostgreSQL roles for a shared state: the routers' state followers read, nothing more.

The controller (and every person's `llmgw apply`) connects as the role that owns the state's
tables (it created them) and keeps every right on them. A router's follower (`llmgw state
follow`, role llmgw_router's llmgw-router-follow) needs only to read the newest serial and
LISTEN for writes, so it gets a role of its own with, in the state's schema:

    GRANT USAGE ON SCHEMA <schema> TO <follower>
    GRANT SELECT ON <schema>.llmgw_state_head, <schema>.llmgw_state_serials TO <follower>

and nothing on `llmgw_controller_runs` (approvals), `llmgw_locks` (leadership, the writers'
lock) or `llmgw_state_routers`; rights it was given before on any of the state's tables are
revoked first. LISTEN needs no grant. A compromised router then can neither approve nor
insert a run, take the controller's lease, nor write a serial. `grant_follower_sql` is the
SQL (`llmgw state grant-follower ROLE --print` shows it), `grant_follower` runs it as the
owner. Creating the role itself (`CREATE ROLE ... LOGIN PASSWORD ...`) is the database
administrator's, with the password kept in llmgw_router_state_follow_password.
"""

from __future__ import annotations

import re
from typing import Any

from llmgw.errors import StateError

# What a follower reads (PostgresBackend.read and follow), and every table the state keeps
# beside them, whose rights it must not have.
FOLLOWER_READS = ("llmgw_state_head", "llmgw_state_serials")
STATE_TABLES = (*FOLLOWER_READS, "llmgw_state_routers", "llmgw_locks", "llmgw_controller_runs")
ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def grant_follower_sql(role: str, schema: str, tables: tuple[str, ...] = STATE_TABLES) -> list[str]:
    """The statements that make `role` a read-only follower of the state in `schema` (whose
    tables are `tables`: the state's, once a controller has run)."""
    for what, name in (("role", role), ("schema", schema)):
        if not ROLE.fullmatch(name):
            raise StateError(f"the {what} name {name!r} is not a plain PostgreSQL name",
                             hint="use lower-case letters, digits and _ (at most 63), starting with a letter")
    revoked = ", ".join(f"{schema}.{t}" for t in STATE_TABLES if t in tables)
    reads = ", ".join(f"{schema}.{t}" for t in FOLLOWER_READS)
    return [f"REVOKE ALL ON {revoked} FROM {role}",
            f"GRANT USAGE ON SCHEMA {schema} TO {role}",
            f"GRANT SELECT ON {reads} TO {role}"]


def grant_follower(cur: Any, role: str) -> list[str]:
    """Run `grant_follower_sql` in the schema `cur`'s connection keeps the state in (as the
    tables' owner); the statements run, for the caller to show."""
    grant_follower_sql(role, "public")  # the name is checked before any query names it
    cur.execute("SELECT current_schema()")
    schema = cur.fetchone()[0]
    if schema is None:
        raise StateError("the state's connection has no current schema", hint="set search_path in the URL")
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
    if cur.fetchone() is None:
        raise StateError(f"there is no PostgreSQL role {role!r}",
                         hint=f"create it first (as the database's administrator): CREATE ROLE {role} LOGIN "
                              "PASSWORD '...'")
    tables = []
    for table in STATE_TABLES:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        if cur.fetchone()[0]:
            tables.append(table)
    done = grant_follower_sql(role, schema, tuple(tables))
    for stmt in done:
        cur.execute(stmt)
    return done


def writable(cur: Any) -> list[str]:
    """The state's tables the connection's role may write (a follower should have none)."""
    out = []
    for table in STATE_TABLES:
        cur.execute("SELECT CASE WHEN to_regclass(%s) IS NULL THEN false "  # CASE: in this order
                    "ELSE has_table_privilege(%s, 'INSERT, UPDATE, DELETE') END", (table, table))
        if cur.fetchone()[0]:
            out.append(table)
    return out
