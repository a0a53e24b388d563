#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""Ansible module llmgw.cluster.gpu_facts: the host's NVIDIA GPUs and their health."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Report the host's NVIDIA GPUs, their class, memory and health, for llmgw placement
version_added: "0.1.0"
description:
  - Queries NVML through nvidia-ml-py (C(pynvml)) for every GPU - index, UUID, name, a
    placement class such as C(H100-80GB), memory total and used, and the problems that
    keep a GPU out of placement, each as a sentence.
  - "Health problems reported: the GPU is lost or inaccessible; uncorrectable (volatile)
    ECC errors; retired pages pending; a row-remapping failure or pending remap; thermal
    (hardware or software) or power-brake throttling active now; a recovery action NVML
    asks for (reset, reboot, drain); on NVSwitch systems, a GPU that has not joined the
    fabric (nvidia-fabricmanager down); a PCIe link narrower than it can be; an NVLink down
    while others are up; and fatal Xid errors since boot (48, 61, 62, 64, 74, 79, 94, 95,
    119, 120, 140, 154) from the kernel log (journalctl -k, else dmesg) and NVML's events,
    each with its number, meaning and time, mapped to the GPU by PCI address."
  - Notes (the GPU stays placeable) - application Xids (13, 31, 43...), NVLink error
    counters, time held back by the thermal or power limit, a PCIe generation below its
    maximum (normal while idle).
  - Unknown - a health check that could not be read (the kernel log unreadable, an NVML
    query failing other than as not supported) is listed in C(unknown); llmgw does not
    place on such a GPU unless the host sets C(llmgw_gpu_health_unknown=allow).
  - A host without the NVIDIA driver, without the NVML library or without nvidia-ml-py
    reports I(no GPUs known) with the reason in C(llmgw_gpus_unknown_reason). The module
    never fails for that; unknown is not the same as none.
  - "Topology, for placement: per GPU its NUMA node and PCIe root (sysfs), NVML's topology
    level to every other GPU (C(nvmlDeviceGetTopologyCommonAncestor): internal, single,
    multiple, hostbridge, node, system) and the GPUs at the far end of its active NVLinks.
    On an NVSwitch system, the state of C(nvidia-fabricmanager) (systemd's word)."
  - The class is C(MODEL-NNGB) - the model from the name without vendor words, the size
    from the name when it has one, else the nominal size nearest the reported memory
    (C(NVIDIA H100 80GB HBM3) -> C(H100-80GB), C(NVIDIA L40S) -> C(L40S-48GB)).
  - Read-only; C(changed) is always false.
author:
  - llmgw contributors
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the managed host, and the NVIDIA driver. The
    playbook C(playbooks/facts.yml) installs nvidia-ml-py when C(llmgw_install_nvml) is true.
options:
  event_wait_ms:
    description:
      - How long to listen for NVML's critical-Xid events, in milliseconds, besides reading
        the kernel log; 0 does not listen.
    type: int
    default: 200
  root:
    description: Where C(/sys) is read from (each GPU's NUMA node and PCIe root). Only tests change it.
    type: path
    default: /
extends_documentation_fragment:
  - llmgw.cluster.facts
notes:
  - Works without Ansible too (see C(scripts/gpu-check)); the logic lives in the
    collection's C(module_utils/gpu.py).
"""

EXAMPLES = r"""
- name: Gather GPU facts
  llmgw.cluster.gpu_facts:

- name: Show unhealthy GPUs
  ansible.builtin.debug:
    msg: "{{ item.index }}: {{ item.problems | join('; ') }}"
  loop: "{{ ansible_facts.llmgw_gpus | default([], true) }}"
  when: item.problems | length > 0
"""

RETURN = r"""
ansible_facts:
  description: Facts added under the C(llmgw_) namespace.
  returned: always
  type: complex
  contains:
    llmgw_gpus:
      description:
        - Every GPU NVML lists, in index order; C(null) when nothing is known (see
          C(llmgw_gpus_unknown_reason)); an empty list when NVML works and there is none.
      returned: always
      type: list
      elements: dict
      sample:
        - index: 0
          uuid: GPU-5e0c2a47-7c7e-d4a2-8b1c-3f5d0e9a1b2c
          name: NVIDIA H100 80GB HBM3
          gpu_class: H100-80GB
          memory_total_mb: 81559
          memory_used_mb: 512
          pci_bus_id: "0000:1b:00.0"
          vbios: 96.00.89.00.01
          numa_node: 0
          pci_root: pci0000:15
          topology: {"1": single, "2": node, "4": system}
          nvlink_peers: null
          problems: []
          notes: []
          unknown: []
      contains:
        index: {description: NVML index., type: int}
        uuid: {description: NVML UUID (C(unknown-N) when the GPU is lost)., type: str}
        name: {description: The name NVML reports., type: str}
        gpu_class: {description: Placement class, MODEL-NNGB., type: str}
        memory_total_mb: {description: Memory in MiB; null when not known., type: int}
        memory_used_mb: {description: Memory in use in MiB; null when not known., type: int}
        pci_bus_id: {description: PCI address as sysfs spells it; null when not known., type: str}
        vbios: {description: The GPU's VBIOS version; null when not known., type: str}
        numa_node: {description: The NUMA node sysfs gives the GPU; null when not known (or -1)., type: int}
        pci_root: {description: The PCIe root complex it hangs off (C(pci0000:15)); null when not known., type: str}
        topology:
          description: GPU index -> NVML's common-ancestor level with that GPU (internal, single, multiple,
            hostbridge, node, system); null when NVML could not say.
          type: dict
        nvlink_peers:
          description: GPU indices at the far end of its active NVLinks; null without NVLink.
          type: list
          elements: int
        problems: {description: Each problem as a sentence; empty when healthy., type: list, elements: str}
        notes: {description: Findings that do not keep the GPU out, as sentences., type: list, elements: str}
        unknown: {description: Health checks that could not be read, as sentences., type: list, elements: str}
    llmgw_gpu_host:
      description: The NVIDIA stack as this host runs it, and host-wide notes.
      returned: always
      type: dict
      sample: {driver_version: "570.133.20", cuda_version: "12.8", kernel_log: journalctl, notes: [],
               fabric_manager: null}
      contains:
        driver_version: {description: The NVIDIA driver's version; null when not known., type: str}
        cuda_version: {description: The newest CUDA the driver supports; null when not known., type: str}
        kernel_log: {description: Where Xid errors were read (journalctl or dmesg); null when unreadable., type: str}
        notes: {description: Host-wide notes (Xids at addresses NVML does not list, events unavailable)., type: list,
                elements: str}
        fabric_manager:
          description: nvidia-fabricmanager's state (active, inactive, failed, not installed) on an NVSwitch
            system; null elsewhere, or when systemd could not say.
          type: str
    llmgw_gpus_unknown_reason:
      description: Why C(llmgw_gpus) is null (no driver, no library, nvidia-ml-py missing).
      returned: always
      type: str
      sample: nvidia-ml-py is not installed on the host (pip install nvidia-ml-py, or set llmgw_install_nvml)
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmgw.cluster.plugins.module_utils.gpu import collect, load_nvml
from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import run_command

ARGUMENT_SPEC = {"event_wait_ms": {"type": "int", "default": 200}, "root": {"type": "path", "default": "/"}}


def build_module() -> AnsibleModule:
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def gpu_facts(nvml: object, run=None, event_wait_ms: int = 0, root: str = "/") -> dict:
    """The facts for an NVML handle (pynvml, a substitute in tests, or None when missing);
    `run` reads the kernel log (argv -> rc, out, err; None: not read); `root`: where /sys is."""
    found = collect(nvml, run, event_wait_ms, root)
    return {"llmgw_gpus": found["gpus"], "llmgw_gpus_unknown_reason": found["reason"],
            "llmgw_gpu_host": found["host"]}


def main() -> None:
    module = build_module()
    wait = max(0, min(int(module.params["event_wait_ms"]), 10000))
    module.exit_json(changed=False, ansible_facts=gpu_facts(load_nvml(), run_command, wait,
                                                          module.params["root"]))


if __name__ == "__main__":
    main()
