# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""The attributes every llmgw facts module shares: read-only, so check mode changes nothing."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Facts modules only read the host; check mode gathers the same facts.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to show a diff of.
  facts:
    support: full
    description: The module returns C(ansible_facts).
"""
