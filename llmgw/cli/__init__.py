"""The `llmgw` command: one click group, one module per noun under llmgw/cli/.

`llmgw -C DIR <verb>` runs as if started in DIR, like git and make. Expected errors
(LlmgwError) print `Error: ...` and exit 1 (2 for usage); only bugs show a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from llmgw import __version__
from llmgw.cli import (
    apply_cmd,
    bench_cmd,
    catalog_cmd,
    check_cmd,
    controller_cmd,
    edit_cmd,
    fabrics_cmd,
    facts_cmd,
    keys_cmd,
    lab_cmd,
    output,
    plan_cmd,
    router_cmd,
    show_cmd,
    site_cmd,
    state_cmd,
    views_cmd,
    weights_cmd,
)
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import LlmgwError

__all__ = ["COMMAND_MODULES", "AppContext", "cli", "main", "pass_app"]

# Each module lists its click commands in `COMMANDS`; this order is the order of `llmgw --help`.
COMMAND_MODULES = [
    site_cmd,
    catalog_cmd,
    lab_cmd,
    facts_cmd,
    fabrics_cmd,
    router_cmd,
    keys_cmd,
    plan_cmd,
    show_cmd,
    apply_cmd,
    state_cmd,
    controller_cmd,
    edit_cmd,
    views_cmd,
    bench_cmd,
    check_cmd,
    weights_cmd,
]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Run as if llmgw was started in DIR (the site folder).")
@click.version_option(__version__, prog_name="llmgw")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """Declarative LLM inference on GPU hosts, driven by Ansible and systemd."""
    ctx.obj = AppContext(directory=directory)


for _module in COMMAND_MODULES:
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: expected errors print themselves, without a traceback."""
    try:
        cli.main(args=argv, prog_name="llmgw", standalone_mode=False)
    except LlmgwError as exc:
        output.print_error(exc)
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
