"""Loading an Activator named `MODULE:FACTORY` (`router serve --activator`).

FACTORY is called as `factory(state_path=PATH, site_dir=PATH or None)` and returns an
Activator (ondemand.py): `state_path` is the state file the router serves, `site_dir` the
site folder it runs in (None without one). A factory that needs the site loads it from
`site_dir` itself (llmgw.site.Site.load): the router does not, so the site and its catalog
loader stay out of the router process (tests/maintenance/test_router_closure.py) unless a
plugin asks for them.

Here rather than in the CLI because every worker of a multi-worker router (workers.py)
loads its own from the same words.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from llmgw.errors import UsageError
from llmgw.router.ondemand import Activator


def load_activator(spec: str, state_path: Path, site_dir: Path | None) -> Activator:
    """`module:factory`, called as factory(state_path=..., site_dir=...) -> Activator."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--activator {spec!r} is not MODULE:FACTORY")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load the activator {spec!r}: {exc}") from None
    activator: Activator = factory(state_path=state_path, site_dir=site_dir)
    return activator
