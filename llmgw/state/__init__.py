"""The applied state: its schema, and the backends that keep it.

    model.py     the schema (State, Replica, Shard, ModelRecord), pinned at version 1
    backend.py   what every backend offers: read, compare-and-set write, a named lock, history
    capabilities.py what some backends offer beyond it (Leases, Follow, Database, FileBacked),
                    asked for with `offers` / `require` instead of testing a backend's class
    local.py     a file on this machine (the default): atomic writes, an flock
    postgres.py  PostgreSQL: every serial kept, a leased lock, fencing, NOTIFY on write
    select.py    which backend a site uses (`state:` in llmgw.yaml), and its password; imported
                    as llmgw.state.select, not offered here: it loads the site and its catalog
                    loader, which the router (it imports this package) must not
    roles.py     PostgreSQL roles for a shared state: the routers' followers read, nothing more
    summary.py   the state at a glance (`llmgw status`, the dashboard): serial, writer, lock holder
"""

from llmgw.state.backend import (
    LockHeld,
    LockInfo,
    SerialRecord,
    StateBackend,
    WriteMeta,
    default_author,
    git_commit,
    lock_waiting,
)
from llmgw.state.capabilities import Database, FileBacked, Follow, Leases, offers, require
from llmgw.state.local import LocalBackend, read_state, state_lock, write_state
from llmgw.state.model import (
    STATE_VERSION,
    AdapterPath,
    AdapterRecord,
    LoadedAdapter,
    ModelRecord,
    Replica,
    ReplicaState,
    RouteGuardRecord,
    RouteRecord,
    RouteTargetRecord,
    Routing,
    ScalingRecord,
    Shard,
    State,
    parse_state,
    replica_sort_key,
)
from llmgw.state.postgres import PostgresBackend

__all__ = [
    "STATE_VERSION",
    "AdapterPath",
    "AdapterRecord",
    "Database",
    "FileBacked",
    "Follow",
    "Leases",
    "LoadedAdapter",
    "LocalBackend",
    "LockHeld",
    "LockInfo",
    "ModelRecord",
    "PostgresBackend",
    "Replica",
    "ReplicaState",
    "RouteGuardRecord",
    "RouteRecord",
    "RouteTargetRecord",
    "Routing",
    "ScalingRecord",
    "SerialRecord",
    "Shard",
    "State",
    "StateBackend",
    "WriteMeta",
    "default_author",
    "git_commit",
    "lock_waiting",
    "offers",
    "parse_state",
    "read_state",
    "replica_sort_key",
    "require",
    "state_lock",
    "write_state",
]
