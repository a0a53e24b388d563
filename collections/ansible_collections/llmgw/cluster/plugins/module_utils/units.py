# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmgw's systemd units on a host and their state, from systemctl.

Pure Python, no Ansible import; the command runner is an argument (see host_io).
"""

from __future__ import annotations

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
    return [units[n] for n in sorted(units)], None
