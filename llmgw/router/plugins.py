"""Loading an Activator named `MODULE:FACTORY` (`router serve --activator`).

Here rather than in the CLI because every worker of a multi-worker router (workers.py)
loads its own from the same words.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from llmgw.errors import UsageError
from llmgw.router.ondemand import Activator


def load_activator(spec: str, state_path: Path, site: Any) -> Activator:
    """`module:factory`, called as factory(state_path=..., site=...) -> Activator."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--activator {spec!r} is not MODULE:FACTORY")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load the activator {spec!r}: {exc}") from None
    activator: Activator = factory(state_path=state_path, site=site)
    return activator
