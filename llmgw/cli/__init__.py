"""The `llmgw` command: one click group, one module per noun under llmgw/cli/.

`llmgw -C DIR <verb>` runs as if started in DIR, like git and make. Expected errors
(LlmgwError) print `Error: ...` and exit 1 (2 for usage); only bugs show a traceback.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from llmgw import __version__
from llmgw.cli.output import print_error
from llmgw.errors import LlmgwError
from llmgw.site import Site

# Each module defines `register(group)`; the order here is the order of `llmgw --help`.
COMMAND_MODULES = [
    "llmgw.cli.site_cmd",
    "llmgw.cli.catalog_cmd",
    "llmgw.cli.lab_cmd",
    "llmgw.cli.facts_cmd",
    "llmgw.cli.fabrics_cmd",
    "llmgw.cli.router_cmd",
    "llmgw.cli.keys_cmd",
    "llmgw.cli.plan_cmd",
    "llmgw.cli.apply_cmd",
    "llmgw.cli.state_cmd",
    "llmgw.cli.edit_cmd",
    "llmgw.cli.views_cmd",
    "llmgw.cli.weights_cmd",
]


@dataclass
class AppContext:
    directory: Path
    _site: Site | None = field(default=None, repr=False)

    @property
    def site(self) -> Site:
        if self._site is None:
            self._site = Site.load(self.directory)
        return self._site


pass_app = click.make_pass_decorator(AppContext)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Run as if llmgw was started in DIR (the site folder).")
@click.version_option(__version__, prog_name="llmgw")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """Declarative LLM inference on GPU hosts, driven by Ansible and systemd."""
    ctx.obj = AppContext(directory=directory)


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(cli)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: expected errors print themselves, without a traceback."""
    try:
        cli.main(args=argv, prog_name="llmgw", standalone_mode=False)
    except LlmgwError as exc:
        print_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(0)
