"""The state at a glance, for `llmgw status` and the dashboard: serial, who wrote it and
when, and who holds the lock now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmgw.errors import LlmgwError
from llmgw.site import Site
from llmgw.state.backend import StateBackend
from llmgw.state.select import backend_for


def state_summary(backend: StateBackend) -> dict[str, Any]:
    state = backend.read()
    history = backend.history()
    last = max(history, key=lambda r: r.serial) if history else None
    lock = backend.lock_info()
    return {"backend": backend.where, "serial": state.serial, "lineage": state.lineage or None,
            "written_by": (last.author or None) if last else None,
            "written_at": last.written_at.isoformat(timespec="seconds") if last and last.written_at else None,
            "operation": (last.operation if last.operation != "-" else None) if last else None,
            "lock": lock.as_json() if lock else None, "error": None}


def site_state_summary(site: Site, extra: Callable[[StateBackend], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The summary, or why it is not known (an unreachable database is a note, not a failure);
    `extra` adds what else lives beside the state (the controller's runs)."""
    try:
        with backend_for(site) as backend:
            return {**state_summary(backend), **(extra(backend) if extra else {})}
    except LlmgwError as exc:
        return {"backend": site.config.state, "serial": None, "lineage": None, "written_by": None,
                "written_at": None, "operation": None, "lock": None, "error": exc.message}


def summary_line(s: dict[str, Any]) -> str:
    if s["error"]:
        return f"State: not known ({s['error']})"
    if not s["serial"]:
        return f"State: empty, at {s['backend']}"
    who = (f", written by {s['written_by']} ({s['operation']})" if s["written_by"] else "") + (
        f" at {s['written_at']}" if s["written_at"] else "")
    lock = s["lock"]
    held = (f"; locked by {lock['holder']} ({lock['operation']}, lock id {lock['id']})" if lock else "; not locked")
    return f"State: serial {s['serial']}{who}{held}"
