"""Cache names on the control side: the host modules' own definition, from the collection.

The definition lives in the collection's module_utils because it must run on hosts
without llmgw installed; loading that very file here keeps one definition, not two.
"""

from __future__ import annotations

from llmgw.ansible_content import module_util


def cache_name(source: str) -> str:
    """The name of `source`'s entry in a host's weights cache."""
    return str(module_util("cache_names").cache_name(source))


def source_basename(source: str) -> str:
    """The part of a cache name after the hash (a whole repository: its name)."""
    return str(module_util("cache_names").source_basename(source))


def is_cache_name(name: str) -> bool:
    return bool(module_util("cache_names").is_cache_name(name))
