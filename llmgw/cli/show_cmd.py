"""`llmgw show PLAN_FILE`: a saved plan for people, for a review comment, or as JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import LlmgwError, UsageError
from llmgw.planner import Plan, load_plan
from llmgw.planner.markdown import render_markdown
from llmgw.planner.render import render_plan
from llmgw.state import State
from llmgw.state.select import backend_for


def read_plan(path: Path) -> Plan:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the plan {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return load_plan(text, str(path))


@click.command("show")
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True,
              help="text as `llmgw plan` prints it; markdown for a pull request comment; json as saved.")
@pass_app
def show(app: AppContext, plan_file: Path, fmt: str) -> None:
    """Show a plan saved by `llmgw plan --out FILE`, without planning again.

    Markdown escapes every name and reason, so a plan from an untrusted pull request
    cannot inject markup into the comment. Contacts no host; text reads the state (when
    reachable) to show what replaced replicas were."""
    plan = read_plan(plan_file)
    if fmt == "json":
        sys.stdout.write(plan.to_json())
    elif fmt == "markdown":
        click.echo(render_markdown(plan), nl=False)
    else:
        state = State(lineage="")
        try:
            with backend_for(app.site) as backend:
                state = backend.read()
        except LlmgwError:
            pass  # shown without the replaced replicas' old shards
        click.echo(render_plan(plan, state), nl=False)


# What `llmgw` attaches to its group.
COMMANDS: list[click.Command] = [show]
