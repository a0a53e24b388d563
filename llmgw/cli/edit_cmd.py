"""Operator edits that become commits: cordon, uncordon, drain, scale, model add/remove.

Each prints the diff it wrote, so the operator sees exactly what to commit; each is
refused with nothing written when the result would be invalid.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from llmgw import edits
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import UsageError
from llmgw.inventory import NodeState, load_inventory
from llmgw.nodetime import DEFAULT_DRAIN_DEADLINE, deadline_after, format_time
from llmgw.site import Site

_STATE_NOTES: dict[NodeState, str] = {
    "cordoned": "no new replicas will be placed there; the ones it runs stay",
    "draining": "the next apply moves its replicas elsewhere, each replacement serving before its original stops",
    "ready": "new replicas may be placed there again",
}


def _show(site: Site, edit: edits.FileEdit, done: str) -> None:
    edit.write()
    click.echo(edit.diff(site.root), nl=False)
    click.echo(done)
    click.echo("Commit the change, then run `llmgw plan` to see what it does.")


def _node_command(verb: str, state: NodeState, summary: str) -> click.Command:
    @click.command(verb, help=f"{summary}\n\nSets `llmgw_node_state: {state}` for NODE where the inventory "
                   "defines it (YAML only), keeping comments and order. Nothing changes on the hosts until "
                   "`llmgw apply`.")
    @click.argument("node")
    @click.option("--gpu", type=click.IntRange(min=0),
                  help="Only this GPU (its index): the node's other GPUs stay as they are.")
    @pass_app
    def command(app: AppContext, node: str, gpu: int | None) -> None:
        site = app.site
        if gpu is not None:
            _gpu_command(site, node, gpu, verb)
            return
        edit = edits.node_state_edit(site.inventory, node, state)
        if edit is None:
            click.echo(f"{node} is already {state}; nothing was written.")
            return
        _show(site, edit, f"{node} is now {state}: {_STATE_NOTES[state]}.")

    return command


def _gpu_command(site: Site, node: str, gpu: int, verb: str) -> None:
    if verb == "drain":
        raise click.UsageError("drain moves a whole node's replicas; cordon the GPU instead (--gpu with cordon)")
    cordon = verb == "cordon"
    edit = edits.gpu_cordon_edit(site.inventory, node, gpu, cordon)
    word = "cordoned" if cordon else "placeable"
    if edit is None:
        click.echo(f"GPU {gpu} of {node} is already {word}; nothing was written.")
        return
    _show(site, edit, f"GPU {gpu} of {node} is now {word}: " + (
        "no new shard will be placed on it; the one it runs stays." if cordon else "it may take new shards again."))


cordon = _node_command("cordon", "cordoned", "Place no new replicas on NODE; the ones it runs stay.")
uncordon = _node_command("uncordon", "ready", "Let NODE take new replicas again (undoes cordon and drain).")


@click.command("drain")
@click.argument("node")
@click.option("--deadline", metavar="DURATION",
              help=f"How long replicas that no other node can take stay on NODE (30m, 1h, 90s; default "
                   f"{DEFAULT_DRAIN_DEADLINE}). The first plan after it destroys them, even below scaling.min.")
@click.option("--gpu", type=click.IntRange(min=0), hidden=True)  # only to say what to run instead
@pass_app
def drain(app: AppContext, node: str, deadline: str | None, gpu: int | None) -> None:
    """Move every replica off NODE at the next apply, without dropping a request.

    Sets `llmgw_node_state: draining` and `llmgw_drain_deadline` (a UTC time, now plus
    --deadline) for NODE where the inventory defines it (YAML only), keeping comments and
    order. Until the deadline, a replica no other node can take stays and the plan says
    until when; the first plan after it destroys that replica (reason drain_deadline) and
    says how far below scaling.min its model falls. Nothing changes on the hosts until
    `llmgw apply`; `llmgw uncordon NODE` ends the drain.
    """
    if gpu is not None:
        _gpu_command(app.site, node, gpu, "drain")
    site = app.site
    host = load_inventory(site.inventory).hosts.get(node)
    if deadline is None and host is not None and host.node_state == "draining" and host.drain_deadline:
        click.echo(f"{node} is already draining until {format_time(host.drain_deadline)}; nothing was written. "
                   "Pass --deadline to set another.")
        return
    try:
        until = deadline_after(deadline or DEFAULT_DRAIN_DEADLINE, datetime.now(UTC))
    except ValueError as exc:
        raise UsageError(f"--deadline: {exc}", hint="give a duration like 30m, 1h or 90s") from None
    edit = edits.node_state_edit(site.inventory, node, "draining", until)
    when = f"until {format_time(until)}" + (f" (the default {DEFAULT_DRAIN_DEADLINE} from now)" if deadline is None
                                             else "")
    if edit is None:
        click.echo(f"{node} is already draining {when}; nothing was written.")
        return
    _show(site, edit, f"{node} is now draining {when}: {_STATE_NOTES['draining']}; a replica no other node can "
                      "take by then is destroyed by the first plan after it.")


@click.command("scale")
@click.argument("model")
@click.option("--min", "minimum", type=click.IntRange(min=0),
              help="Replicas the planner keeps placed at all times (0: on demand only).")
@click.option("--max", "maximum", type=click.IntRange(min=0),
              help="The most replicas the controller may run on demand; never below --min.")
@click.option("--idle-timeout", metavar="DURATION",
              help="For min 0 models: how long without a request before the last replica stops (30m, 1h).")
@pass_app
def scale(app: AppContext, model: str, minimum: int | None, maximum: int | None, idle_timeout: str | None) -> None:
    """Set how MODEL (a name or alias) scales, in its catalog file; prints what is in force then.

    The planner places --min replicas and keeps them running. Replicas above min start
    and stop only with the model's `scaling.target_in_flight` set and a controller run
    with --demand-listen: it adds replicas up to --max when the load exceeds that target
    per replica and removes them after down_cooldown of lower load. A min 0 model has no
    replica until a request asks the controller for one, which stops after --idle-timeout
    with no request. Without target_in_flight nothing starts replicas above min, and the
    planner leaves running ones up to max alone: `scale MODEL --min N --max N` makes it
    destroy those above N. Without --max, an existing max is kept (and must not be below
    --min); a catalog with no max has max follow min. Only the model's scaling block is
    edited.
    """
    site = app.site
    scaled = edits.scale_edit(site, model, minimum, maximum, idle_timeout)
    name, now = scaled.model.name, edits.in_force(scaled.model)
    if scaled.edit is None:
        click.echo(f"{name} already scales like that; nothing was written. In force: {now}")
        return
    _show(site, scaled.edit, f"Scaled {name}; in force once applied: {now}")

@click.group("model")
def model_group() -> None:
    """Add models to the catalog or remove them."""

@model_group.command("add")
@click.option("-f", "--file", "source", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="A YAML file with `models:` (one or more), or one model mapping.")
@pass_app
def model_add(app: AppContext, source: Path) -> None:
    """Add the models in FILE to the catalog, as a new file catalog/<first model>.yaml."""
    site = app.site
    edit = edits.model_add_edit(site, source)
    _show(site, edit, f"Added {edit.path.relative_to(site.root)} to the catalog.")

@model_group.command("remove")
@click.argument("name")
@pass_app
def model_remove(app: AppContext, name: str) -> None:
    """Remove model NAME from the catalog (refused while other models fall back to it).

    The next apply drains and destroys its replicas; its cached weights become
    orphans that `llmgw weights orphans --collect` reclaims.
    """
    site = app.site
    edit = edits.model_remove_edit(site, name)
    _show(site, edit, f"Removed {name} from the catalog.")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [cordon, uncordon, drain, scale, model_group]
