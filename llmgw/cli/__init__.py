"""The `llmgw` command: one click group, one module per noun under llmgw/cli/.

`llmgw -C DIR <verb>` runs as if started in DIR, like git and make. Expected errors
(LlmgwError) print `Error: ...` and exit 1 (2 for usage); only bugs show a traceback.
"""

from __future__ import annotations

import gc
import sys
from importlib import import_module
from pathlib import Path

import click

from llmgw import __version__
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import LlmgwError

__all__ = ["VERBS", "AppContext", "cli", "main", "pass_app"]

# Verb -> the module under llmgw/cli/ whose `COMMANDS` defines it, in the order of
# `llmgw --help`. Only the module of the verb being run is imported: `catalog validate`
# on a pull request need not load Ansible, the router and the HTTP clients first (that
# was ~1 s of CPU per invocation). tests/cli/test_cli.py checks this table against every
# module's COMMANDS, so a new command that is missing here fails a test, not a user.
VERBS: dict[str, str] = {
    "init": "site_cmd",
    "catalog": "catalog_cmd",
    "lab": "lab_cmd",
    "facts": "facts_cmd",
    "nodes": "facts_cmd",
    "fabrics": "fabrics_cmd",
    "router": "router_cmd",
    "keys": "keys_cmd",
    "plan": "plan_cmd",
    "explain": "plan_cmd",
    "show": "show_cmd",
    "apply": "apply_cmd",
    "state": "state_cmd",
    "controller": "controller_cmd",
    "approve": "approve_cmd",
    "cordon": "edit_cmd",
    "uncordon": "edit_cmd",
    "drain": "edit_cmd",
    "scale": "edit_cmd",
    "shift": "shift_cmd",
    "model": "edit_cmd",
    "status": "views_cmd",
    "models": "views_cmd",
    "replicas": "views_cmd",
    "logs": "views_cmd",
    "bench": "bench_cmd",
    "check": "check_cmd",
    "weights": "weights_cmd",
}


# Verbs whose process must not unpickle the bastion's memo of parsed inputs (llmgw.facts): the router
# serves clients beside its dashboard, and reads its site copy without it.
_NO_MEMO = frozenset({"router"})


class _LazyGroup(click.Group):
    """A group that imports a verb's module when the verb is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = VERBS.get(cmd_name)
        if module is None:
            return None
        commands: list[click.Command] = import_module(f"llmgw.cli.{module}").COMMANDS
        return next((c for c in commands if c.name == cmd_name), None)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Run as if llmgw was started in DIR (the site folder).")
@click.version_option(__version__, prog_name="llmgw")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """Declarative LLM inference on GPU hosts, driven by Ansible and systemd."""
    ctx.obj = AppContext(directory=directory)
    if ctx.invoked_subcommand not in _NO_MEMO:
        from llmgw.facts import memo, use_memo

        use_memo(memo)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: expected errors print themselves, without a traceback."""
    try:
        _run(argv)
    finally:
        # The process ends with the command. Python's last act is a full collection over every
        # object still alive (a view of 4,096 hosts keeps a few million: ~0.3 s of CPU, for a
        # process about to hand its memory back): frozen objects are left out of it.
        gc.freeze()


def _run(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="llmgw", standalone_mode=False)
    except LlmgwError as exc:
        from llmgw.cli import output  # rich's tables and consoles: not every command needs them

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
