# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""Filter llmgw.cluster.fabric_probes: which hosts run ibnetdiscover, one per fabric."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

DOCUMENTATION = r"""
name: fabric_probes
short_description: Choose the hosts that run ibnetdiscover, about one per InfiniBand fabric
version_added: "0.1.0"
description:
  - Input is C(hostvars); O(hosts) are the hosts of the play (those that answered).
  - Hosts with C(llmgw_fabric_probe=true) always probe; hosts with C(llmgw_fabric_probe=false) never do.
  - Every other fabric is covered by the first host, in name order, whose active ports see it, where
    a fabric is told apart by the subnet prefix and subnet manager LID of a port
    (C(llmgw_ib_fabric_key) from M(llmgw.cluster.ib_facts)). A host covering several fabrics is
    chosen once and maps each of them.
options:
  _input:
    description: hostvars.
    type: dict
    required: true
  hosts:
    description: The hosts to choose from.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Pick the probes
  ansible.builtin.set_fact:
    _probes: "{{ hostvars | llmgw.cluster.fabric_probes(ansible_play_hosts) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: Host names, sorted.
  type: list
  elements: str
"""


def _flag(value: Any) -> Optional[bool]:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    return None


def choose_probes(keys: Dict[str, str], flags: Dict[str, Optional[bool]]) -> List[str]:
    """Hosts to probe from each host's fabric key (comma-joined per-port keys) and flag."""
    probes = sorted(h for h, f in flags.items() if f is True)
    covered = {k for h in probes for k in keys.get(h, "").split(",") if k}
    for host in sorted(keys):
        if flags.get(host) is False or host in probes:
            continue
        mine = {k for k in keys[host].split(",") if k}
        if mine - covered:
            probes.append(host)
            covered |= mine
    return sorted(probes)


def fabric_probes(hostvars: Any, hosts: List[str]) -> List[str]:
    keys: Dict[str, str] = {}
    flags: Dict[str, Optional[bool]] = {}
    for host in hosts:
        hv = hostvars[host]
        facts = hv.get("ansible_facts", {}) or {}
        keys[host] = str(facts.get("llmgw_ib_fabric_key") or "")
        flags[host] = _flag(hv.get("llmgw_fabric_probe"))
    return choose_probes(keys, flags)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"fabric_probes": fabric_probes}
