"""Which serial each router was seen to load: apply's bookkeeping of its deliveries.

Not part of the state interface (a backend reads and writes states, llmgw.state): apply keeps it
beside the state, where the state lives, so that an apply killed before delivering leaves the routers
known to be behind, and the next apply delivers to them even with no changes.

    Deliveries        router host -> the newest serial delivered to it and seen loaded
    deliveries_for    where a backend's deliveries are kept: `<state>.routers` beside a local
                      file, the `llmgw_state_routers` table beside a PostgreSQL state
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path

from llmgw.errors import StateError
from llmgw.state import Database, FileBacked, StateBackend, offers
from llmgw.yamlio import atomic_write

__all__ = ["Deliveries", "deliveries_for"]


class Deliveries(ABC):
    @abstractmethod
    def delivered(self) -> dict[str, int]:
        """Router host -> the newest serial apply delivered to it and saw it load."""

    @abstractmethod
    def mark_delivered(self, routers: list[str], serial: int) -> None:
        """Record that `routers` hold `serial` (an apply killed before this leaves them behind)."""

    def routers_behind(self, routers: list[str], serial: int) -> list[str]:
        """Those of `routers` not known to hold `serial`: apply delivers to them even with no changes."""
        known = self.delivered()
        return sorted(r for r in routers if known.get(r, 0) < serial)


class _FileDeliveries(Deliveries):
    """`<state>.routers`: the lineage it counts for, and each router's serial."""

    def __init__(self, backend: StateBackend, state_path: Path) -> None:
        self._backend = backend
        self._path = state_path.with_name(state_path.name + ".routers")

    def delivered(self) -> dict[str, int]:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # unknown: every router counts as behind, and gets the state again
        if not isinstance(data, dict) or data.get("lineage") != self._backend.read().lineage:
            return {}
        routers = data.get("routers")
        return {str(k): int(v) for k, v in routers.items() if isinstance(v, int)} if isinstance(routers, dict) else {}

    def mark_delivered(self, routers: list[str], serial: int) -> None:
        known = self.delivered()
        known.update({r: serial for r in routers})
        body = {"lineage": self._backend.read().lineage, "routers": dict(sorted(known.items()))}
        atomic_write(self._path, json.dumps(body, indent=2) + "\n")


class _TableDeliveries(Deliveries):
    """The `llmgw_state_routers` table (created with the state's schema, llmgw.state.postgres)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def delivered(self) -> dict[str, int]:
        with self._db.transaction() as cur:
            cur.execute("SELECT router, serial FROM llmgw_state_routers")
            return {r[0]: int(r[1]) for r in cur.fetchall()}

    def mark_delivered(self, routers: list[str], serial: int) -> None:
        with self._db.transaction() as cur:
            for r in sorted(routers):
                cur.execute("INSERT INTO llmgw_state_routers (router, serial) VALUES (%s, %s) ON CONFLICT (router) "
                            "DO UPDATE SET serial = GREATEST(llmgw_state_routers.serial, EXCLUDED.serial), "
                            "delivered_at = now()", (r, serial))


def deliveries_for(backend: StateBackend) -> Deliveries:
    """Where `backend`'s router deliveries are kept."""
    database = offers(backend, Database)
    if database is not None:
        return _TableDeliveries(database)
    local = offers(backend, FileBacked)
    if local is not None:
        return _FileDeliveries(backend, local.path)
    raise StateError(f"apply cannot record router deliveries beside the state at {backend.where}",
                     hint="use a local state file or a PostgreSQL state (`state:` in llmgw.yaml)")
