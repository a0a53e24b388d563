#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""Ansible module llmgw.cluster.node_facts: memory, CPUs, model storage, weights, units, engines."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_facts
short_description: Report what an llmgw host has besides GPUs - memory, CPUs, model storage, weights, units, engines
version_added: "0.1.0"
description:
  - Memory the host can really use - C(MemTotal) from C(/proc/meminfo), or the memory
    limit of the cgroup the module runs in when that is lower (containers, slices).
  - CPUs this process may use (affinity, lowered by a cgroup CPU quota).
  - Every filesystem holding one of O(model_dirs) or O(cache_dir), counted once per
    filesystem (grouped by device number, so two dirs on one disk are one pool), with
    free and total bytes and whether it is shared (NFS, Lustre, GPFS, BeeGFS, CephFS,
    CIFS/SMB, FUSE filers) or local. A missing dir is skipped, never reported as 0 free.
  - Weights present - llmgw's cache entries in O(cache_dir) (named
    C(<16 hex of sha256(source)>-<basename>), see C(module_utils/cache_names.py)) and
    operator-provided model files in O(model_dirs) (C(*.gguf), C(*.safetensors), and
    Hugging Face-style folders holding C(config.json) beside weight files). Empty
    files and folders and C(*.part) downloads are not weights.
  - llmgw's systemd units (C(llmgw-*)) present and their active state, and installed
    engine versions (llama.cpp C(llama-server --version), vLLM, SGLang), looked for where
    llmgw's engine role installs them (O(engine_dir)) first.
  - Read-only; C(changed) is always false.
author:
  - llmgw contributors
options:
  model_dirs:
    description: Folders where operators keep model files (host var C(llmgw_model_dirs)).
    type: list
    elements: path
    default: []
  cache_dir:
    description:
      - llmgw's weights cache (C(llmgw_cache_dir), whose default role C(llmgw_defaults) sets).
      - The default is for ad-hoc runs (C(ansible HOST -m llmgw.cluster.node_facts)); playbooks pass it.
    type: path
    default: /var/cache/llmgw
  engine_dir:
    description:
      - Where llmgw's engine role installs engines (role variable C(llmgw_engine_install_dir)) -
        llama-server builds under C(llamacpp/<checksum>/), vLLM and SGLang virtualenvs under
        C(vllm/) and C(sglang/). Searched first.
    type: path
    default: /opt/llmgw/engines
  engine_search_path:
    description: Folders searched next for engine programs (C(llama-server), C(vllm)), then C(PATH).
    type: list
    elements: path
    default: [/usr/local/bin]
  root:
    description:
      - Where C(/proc) and C(/sys) are read from. Only tests change it.
    type: path
    default: /
extends_documentation_fragment:
  - llmgw.cluster.facts
"""

EXAMPLES = r"""
- name: Gather node facts for llmgw
  llmgw.cluster.node_facts:
    model_dirs: "{{ llmgw_model_dirs | default([]) }}"
    cache_dir: "{{ llmgw_cache_dir }}"

- name: Free space on the filesystem of the cache
  ansible.builtin.debug:
    msg: "{{ ansible_facts.llmgw_filesystems | map(attribute='free_bytes') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added under the C(llmgw_) namespace; null means not known.
  returned: always
  type: complex
  contains:
    llmgw_memory_total_mb:
      description: Memory the host can use, MiB (the lower of MemTotal and the cgroup limit).
      type: int
      returned: always
      sample: 515620
    llmgw_memory:
      description: Where the memory figure comes from.
      type: dict
      returned: always
      sample: {meminfo_total_mb: 515620, cgroup_limit_mb: null, total_mb: 515620}
    llmgw_cpus:
      description: CPUs available to processes here.
      type: int
      returned: always
      sample: 128
    llmgw_filesystems:
      description: One entry per filesystem holding a model dir or the cache dir.
      type: list
      elements: dict
      returned: always
      sample:
        - {mount: /, device: /dev/nvme0n1p2, fstype: ext4, shared: false,
           free_bytes: 1900000000000, total_bytes: 3800000000000, paths: [/models, /var/cache/llmgw]}
    llmgw_weights:
      description:
        - Model files and folders present, cache entries marked C(cache=true).
        - An operator's model folder lists its files and their sizes in C(files) (relative paths).
      type: list
      elements: dict
      returned: always
      sample:
        - {path: /var/cache/llmgw/3f2a9c0d1e4b5a6f-qwen2.5-7b-instruct-q4_k_m.gguf, size_bytes: 4683073536,
           cache: true, cache_name: 3f2a9c0d1e4b5a6f-qwen2.5-7b-instruct-q4_k_m.gguf}
        - {path: /models/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a09a3545, size_bytes: 15231271864,
           cache: false, cache_name: null, files: {config.json: 663, model-00001-of-00004.safetensors: 3945441440}}
    llmgw_units:
      description: llmgw systemd units present; null when systemd cannot be asked.
      type: list
      elements: dict
      returned: always
      sample:
        - {name: llmgw-qwen2.5-7b-1-0.service, active_state: active, sub_state: running,
           lineage: 6f1c2b9e-0d4a-4c57-9b1e-2f7a8c3d5e60, gpus: [0, 1], memory_mb: 5120}
    llmgw_units_unknown_reason:
      description: Why C(llmgw_units) is null.
      type: str
      returned: always
    llmgw_engines:
      description: Installed engines (keys as in the catalog - llamacpp, vllm, sglang) and versions.
      type: dict
      returned: always
      sample: {llamacpp: "4567 (1a2b3c4)"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmgw.cluster.plugins.module_utils.cache_names import is_cache_name
from ansible_collections.llmgw.cluster.plugins.module_utils.cpu_memory import cpu_count, memory_facts
from ansible_collections.llmgw.cluster.plugins.module_utils.engine_versions import engine_versions
from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import run_command
from ansible_collections.llmgw.cluster.plugins.module_utils.mounts import filesystems, read_mounts
from ansible_collections.llmgw.cluster.plugins.module_utils.units import llmgw_units
from ansible_collections.llmgw.cluster.plugins.module_utils.weight_files import find_weights

ARGUMENT_SPEC = {
    "model_dirs": {"type": "list", "elements": "path", "default": []},
    # A checked copy of role llmgw_defaults' value (tests/maintenance/test_defaults.py), for ad-hoc runs.
    "cache_dir": {"type": "path", "default": "/var/cache/llmgw"},
    "engine_dir": {"type": "path", "default": "/opt/llmgw/engines"},
    "engine_search_path": {"type": "list", "elements": "path", "default": ["/usr/local/bin"]},
    "root": {"type": "path", "default": "/"},
}


def build_module() -> AnsibleModule:
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def node_facts(params: dict, run=run_command) -> dict:
    """The facts for module parameters; `run` runs a command (argv -> rc, out, err)."""
    root = params["root"]
    dirs = list(params["model_dirs"] or [])
    cache_dir = params["cache_dir"]
    memory = memory_facts(root)
    units, units_reason = llmgw_units(run)
    return {
        "llmgw_memory_total_mb": memory["total_mb"],
        "llmgw_memory": memory,
        "llmgw_cpus": cpu_count(root),
        "llmgw_filesystems": filesystems(dirs + ([cache_dir] if cache_dir else []), read_mounts(root)),
        "llmgw_weights": find_weights(dirs, cache_dir, is_cache_name),
        "llmgw_units": units,
        "llmgw_units_unknown_reason": units_reason,
        "llmgw_engines": engine_versions(run, list(params["engine_search_path"] or []), params.get("engine_dir")),
    }


def main() -> None:
    module = build_module()
    module.exit_json(changed=False, ansible_facts=node_facts(module.params))


if __name__ == "__main__":
    main()
