"""What apply ships beside a router's site copy, written into a test's site folder.

A router's dashboard (views.sitedata.COPY) reads the placement, the fleet summary and the
fabrics apply made on the bastion (llmgw.views.planned.site_copy_files); a test that serves
the dashboard over an example site plans them the same way, into the site itself.
"""

from __future__ import annotations

from pathlib import Path

from llmgw.site import Site
from llmgw.views.planned import site_copy_files


def ship_site_copy_files(root: Path) -> list[str]:
    """Write the files apply ships for the routers into `root`; their names."""
    files = site_copy_files(Site.load(root))
    for name, data in files.items():
        (root / name).write_bytes(data)
    return sorted(files)
