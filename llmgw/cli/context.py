"""What every `llmgw` command receives: the site folder (`-C DIR`) and the site, loaded on first use.

Its own module so that command modules import it at the top, and `llmgw.cli` (the group)
imports the command modules, with no cycle between the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from llmgw.site import Site


@dataclass
class AppContext:
    directory: Path
    _site: Site | None = field(default=None, repr=False)

    @property
    def site(self) -> Site:
        if self._site is None:
            self._site = Site.load(self.directory)
        return self._site

    def live_site(self, verb: str) -> Site:
        """The site, for a command that contacts its hosts: refused on a recorded site."""
        self.site.require_live(verb)
        return self.site


pass_app = click.make_pass_decorator(AppContext)
