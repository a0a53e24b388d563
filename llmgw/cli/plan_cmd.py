"""`llmgw plan` and `llmgw explain`: what would change, and why a model goes where it goes."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from llmgw import collector
from llmgw.cli.context import AppContext, pass_app
from llmgw.planner.load import load_inputs, site_plan
from llmgw.planner.render import render_plan
from llmgw.yamlio import atomic_write


@click.command("plan")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also save the plan as JSON to this file, for `llmgw apply FILE`.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON instead of text.")
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 0 when nothing changes, 2 when the plan has changes (1 stays an error).")
@pass_app
def plan(app: AppContext, out: Path | None, as_json: bool, detailed_exitcode: bool) -> None:
    """Show what apply would change to make the fleet match the catalog.

    Reads the catalog, the inventory, the facts cache and the state; contacts no host.
    The same inputs always give the same plan, byte for byte.
    """
    # One collector pause for the whole command (llmgw.collector), and the plan's million objects
    # freed (by reference counting, in _plan's return) before it resumes: otherwise its first pass
    # walks them all, a third of a second at 4,096 hosts.
    with collector.paused():
        changes = _plan(app, out, as_json)
    if detailed_exitcode and changes:
        sys.stdout.flush()
        sys.exit(2)  # terraform's convention: 2 = success with changes


def _plan(app: AppContext, out: Path | None, as_json: bool) -> bool:
    """Make, save and show the plan; whether it has changes."""
    inputs, result = site_plan(app.site)
    text = result.to_json()
    if out is not None:
        atomic_write(out, text)
    if as_json:
        sys.stdout.write(text)
    else:
        click.echo(render_plan(result, inputs.state), nl=False)
        if out is not None:
            click.echo(f"\nSaved the plan to {out}; `llmgw apply {out}` applies exactly this plan.")
    return result.has_changes


@click.command("explain")
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@pass_app
def explain_cmd(app: AppContext, model: str, as_json: bool) -> None:
    """Every node considered for MODEL (a name or alias), per profile, and why it was rejected."""
    from llmgw.cli import output  # rich, which `llmgw plan` does not use
    from llmgw.planner.explain import explain, explanation_json, render_explanation  # nor the explainer

    e = explain(load_inputs(app.site), model)
    if as_json:
        output.print_json(explanation_json(e))
    else:
        click.echo(render_explanation(e), nl=False)


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [plan, explain_cmd]
