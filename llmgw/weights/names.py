"""Cache names on the control side: the host modules' own definition, loaded from the collection.

The definition lives in the collection's module_utils because it must run on hosts
without llmgw installed; loading that very file here keeps one definition, not two.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

_REL = Path("ansible_collections/llmgw/cluster/plugins/module_utils/cache_names.py")


def _collections_root() -> Path:
    try:
        from llmgw import resources  # type: ignore[attr-defined,unused-ignore]

        return Path(resources.collections_path())
    except (ImportError, AttributeError):
        return Path(__file__).resolve().parents[2] / "collections"


@cache
def _module() -> ModuleType:
    path = _collections_root() / _REL
    spec = importlib.util.spec_from_file_location("llmgw_cache_names", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cache_name(source: str) -> str:
    """The name of `source`'s entry in a host's weights cache."""
    return str(_module().cache_name(source))


def is_cache_name(name: str) -> bool:
    return bool(_module().is_cache_name(name))
