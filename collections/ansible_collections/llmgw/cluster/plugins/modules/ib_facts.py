#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""Ansible module llmgw.cluster.ib_facts: InfiniBand adapters, and raw ibnetdiscover text."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ib_facts
short_description: Report InfiniBand adapters from sysfs and, when asked, the raw ibnetdiscover output
version_added: "0.1.0"
description:
  - Reads every adapter under C(/sys/class/infiniband) - name, node GUID, node description,
    and per port the state, rate, link layer and port GUID (the low 64 bits of GID 0).
    GUIDs are written C(0x) plus 16 hex digits.
  - With O(ibnetdiscover=true), runs C(ibnetdiscover) once per distinct fabric the host's
    active InfiniBand ports reach (C(-C CA -P PORT); a port whose GUID shows in an earlier
    output is on a fabric already mapped) and returns the raw text. The control side
    parses it (llmgw.fabric). A missing tool or a failed run is a reason, not a failure.
  - C(llmgw_ib_fabric_key) is a signature of the fabrics the host sees (subnet prefix and
    subnet manager LID of each active port); the facts playbook runs ibnetdiscover on the
    first host of each distinct signature.
  - Per adapter, where it sits - its PCI address, NUMA node and PCIe root (from its
    C(device) link in sysfs) - so NCCL can be given the adapters nearest a shard's GPUs.
  - On a host with adapters, the RDMA userspace versions - rdma-core (dpkg or rpm) and
    MLNX_OFED (C(ofed_info -s)) - in C(llmgw_ib_stack).
  - Read-only; C(changed) is always false.
author:
  - llmgw contributors
options:
  ibnetdiscover:
    description: Also run ibnetdiscover and return its raw output.
    type: bool
    default: false
  ibnetdiscover_path:
    description: The ibnetdiscover program (name on C(PATH) or an absolute path).
    type: str
    default: ibnetdiscover
  timeout:
    description: Seconds one ibnetdiscover run may take (a large fabric takes tens of seconds).
    type: int
    default: 300
  root:
    description: Where C(/sys) is read from. Only tests change it.
    type: path
    default: /
requirements:
  - infiniband-diags on the host for O(ibnetdiscover=true).
extends_documentation_fragment:
  - llmgw.cluster.facts
"""

EXAMPLES = r"""
- name: InfiniBand adapters
  llmgw.cluster.ib_facts:

- name: Map the fabric from this host
  llmgw.cluster.ib_facts:
    ibnetdiscover: true
"""

RETURN = r"""
ansible_facts:
  description: Facts added under the C(llmgw_) namespace.
  returned: always
  type: complex
  contains:
    llmgw_ib_adapters:
      description: Every adapter; an empty list when the host has none.
      type: list
      elements: dict
      returned: always
      sample:
        - name: mlx5_0
          node_guid: "0xb83fd20300a20000"
          node_desc: gpu-node-01 mlx5_0
          ports: [{port: 1, state: ACTIVE, rate: 200 Gb/sec (4X HDR), link_layer: InfiniBand,
                   port_guid: "0xb83fd20300a20001"}]
          pci_bus_id: "0000:3b:00.0"
          numa_node: 0
          pci_root: pci0000:3a
    llmgw_ib_stack:
      description: rdma-core and MLNX_OFED versions (each null when not known); null without adapters.
      type: dict
      returned: always
      sample: {rdma_core: 44.0-2, ofed: null}
    llmgw_ib_fabric_key:
      description: Signature of the fabrics the active ports see; empty without active ports.
      type: str
      returned: always
      sample: fe80:0000:0000:0000/1
    llmgw_ibnetdiscover:
      description: Raw ibnetdiscover output (several topology files joined when the host
        reaches several fabrics); null unless asked and it worked.
      type: str
      returned: always
    llmgw_ibnetdiscover_reason:
      description: Why C(llmgw_ibnetdiscover) is null or partial (tool missing, no active port, run failed).
      type: str
      returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import run_command
from ansible_collections.llmgw.cluster.plugins.module_utils.ib import (
    fabric_key,
    public_adapters,
    rdma_stack,
    read_adapters,
    run_ibnetdiscover,
)

ARGUMENT_SPEC = {
    "ibnetdiscover": {"type": "bool", "default": False},
    "ibnetdiscover_path": {"type": "str", "default": "ibnetdiscover"},
    "timeout": {"type": "int", "default": 300},
    "root": {"type": "path", "default": "/"},
}


def build_module() -> AnsibleModule:
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def ib_facts(params: dict, run=None) -> dict:
    """The facts for module parameters; `run` runs a command (argv -> rc, out, err)."""
    timeout = params["timeout"]
    run = run or (lambda argv: run_command(argv, timeout=timeout))
    adapters = read_adapters(params["root"])
    text, reason = None, None
    if params["ibnetdiscover"]:
        text, reason = run_ibnetdiscover(adapters, run, params["ibnetdiscover_path"])
    return {
        "llmgw_ib_adapters": public_adapters(adapters),
        "llmgw_ib_fabric_key": fabric_key(adapters),
        "llmgw_ibnetdiscover": text,
        "llmgw_ibnetdiscover_reason": reason,
        "llmgw_ib_stack": rdma_stack(run) if adapters else None,
    }


def main() -> None:
    module = build_module()
    module.exit_json(changed=False, ansible_facts=ib_facts(module.params))


if __name__ == "__main__":
    main()
