"""Demand at a glance, for `llmgw models`: per model, the controller's last scale decision
(its kind, replicas before and after, the reason, the run), and activations in flight.

Read from the controller's run history (kept beside the state, so every bastion sees it),
as plain run records (`Run.as_json()`): this module imports nothing of the controller,
so the router's dashboard may use it. Demand runs are summarised by llmgw.controller.scaler
as `demand: KIND MODEL CURRENT -> DESIRED replicas: REASON`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_SUMMARY = re.compile(r"^demand: (?P<kind>[a-z-]+) (?P<model>\S+) (?P<current>\d+) -> (?P<desired>\d+) "
                      r"replicas: (?P<reason>.*)$", re.S)


def demand_view(runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"models": {model: last decision}, "activating": [model, ...]} from runs, newest first."""
    models: dict[str, dict[str, Any]] = {}
    activating: list[str] = []
    for run in runs:
        m = _SUMMARY.match(str(run.get("summary", "")))
        if m is None:
            continue
        name = m["model"]
        if run.get("status") == "applying" and m["kind"] in ("activate", "scale-up") and name not in activating:
            activating.append(name)
        if name not in models:
            models[name] = {"kind": m["kind"], "current": int(m["current"]), "desired": int(m["desired"]),
                            "reason": m["reason"], "run": run.get("id"), "status": run.get("status"),
                            "at": run.get("updated_at") or run.get("created_at")}
    return {"models": models, "activating": sorted(activating)}


def demand_lines(view: Mapping[str, Any]) -> list[str]:
    """Lines for people: one per model the controller scaled, then activations in flight."""
    lines = []
    for name, d in sorted(view.get("models", {}).items()):
        lines.append(f"{name}: {d['current']} -> {d['desired']} replicas, {d['kind']} (run {d['run']}, "
                     f"{d['status']}, {d['at']}): {d['reason']}")
    if view.get("activating"):
        lines.append("activations in flight: " + ", ".join(view["activating"]))
    if view.get("error"):
        lines.append(f"not known: {view['error']}")
    return lines
