# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""llmgw's systemd units on a host and their state, from systemctl.

Pure Python, no Ansible import; the command runner is an argument (see host_io).
"""

from __future__ import annotations

import shlex
from typing import Dict, List, Optional, Tuple

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import FactDict, Run


def llmgw_units(run: Run, pattern: str = "llmgw-*") -> Tuple[Optional[List[FactDict]], Optional[str]]:
    """llmgw's systemd units present on the host and their state: (units, reason if unknown).

    Loaded units come from `list-units --all`; unit files never loaded (installed but
    not started) from `list-unit-files`, as inactive. Templates are not units.
    """
    rc, out, err = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "--full",
                        pattern])
    if rc == 127:
        return None, "systemctl is not installed (no systemd)"
    if rc != 0:
        return None, "systemctl failed: %s" % (err.strip() or "exit %d" % rc)
    units: Dict[str, FactDict] = {}
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) < 4:
            continue
        name, load, active, sub = parts[0].lstrip("●* "), parts[1], parts[2], parts[3]
        if not name or (load == "not-found" and active != "active"):
            continue
        units[name] = {"name": name, "active_state": active, "sub_state": sub}
    rc, out, _err = run(["systemctl", "list-unit-files", "--no-legend", "--no-pager", "--full", pattern])
    if rc == 0:
        for line in out.splitlines():
            parts = line.split()
            if not parts or "@." in parts[0] or parts[0] in units:
                continue
            units[parts[0]] = {"name": parts[0], "active_state": "inactive", "sub_state": "dead"}
    lineages = unit_lineages(run, [n for n in sorted(units) if not n.startswith("llmgw-router")])
    for name, unit in units.items():
        unit["lineage"] = lineages.get(name)
    return [units[n] for n in sorted(units)], None


def unit_lineages(run: Run, names: List[str]) -> Dict[str, Optional[str]]:
    """Unit -> LLMGW_LINEAGE from its environment (the llmgw state that wrote it), in one
    `systemctl show`; a unit without one (or when systemctl cannot tell) maps to None."""
    if not names:
        return {}
    rc, out, _err = run(["systemctl", "show", "--no-pager", "-p", "Id", "-p", "Environment", "--", *names])
    found: Dict[str, Optional[str]] = {}
    if rc != 0:
        return found
    for block in out.split("\n\n"):
        props: Dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key] = value
        unit = props.get("Id")
        if not unit:
            continue
        try:
            words = shlex.split(props.get("Environment", ""))
        except ValueError:
            words = []
        found[unit] = next((w.split("=", 1)[1] or None for w in words if w.startswith("LLMGW_LINEAGE=")), None)
    return found
