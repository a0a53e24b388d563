"""`llmgw lab up|down|status`: the local fleet of podman containers that stand in for hosts."""

from __future__ import annotations

import click
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.lab import MAX_NODES, Lab, LabNode


def _rows(nodes: list[LabNode]) -> list[list[str]]:
    return [[n.host, n.container, n.state, n.address or "-",
             f"{n.memory_mb} MiB" if n.memory_mb else "-",
             ", ".join(f"{k}={v}" for k, v in sorted(n.labels.items())) or "-"] for n in nodes]


_COLUMNS = ["HOST", "CONTAINER", "STATE", "ADDRESS", "MEMORY", "LABELS"]
_NAME_HELP = "The lab's name (podman network and container prefix); default: the site's last one, or llmgw-lab."


@click.group("lab")
def lab_group() -> None:
    """The local lab: podman containers booting systemd, reached over SSH like real hosts."""

@lab_group.command("up")
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), default=3, show_default=True,
              help="How many hosts the lab has.")
@click.option("--name", help=_NAME_HELP)
@pass_app
def up(app: AppContext, nodes: int, name: str | None) -> None:
    """Start the lab's hosts (keeping running ones) and write its inventory."""
    lab = Lab(app.live_site("lab up"), name)  # it rewrites the inventory
    tasks: dict[str, TaskID] = {}
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[host]:<6}[/]"),
                  TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=output.err_console, transient=True) as progress:

        def step(host: str, what: str) -> None:
            if host not in tasks:
                tasks[host] = progress.add_task(what, host=host, total=None)
            progress.update(tasks[host], description=what)
            if what == "ready":
                progress.update(tasks[host], total=1, completed=1)

        started = lab.up(nodes, progress=step)
    output.console.print(output.table(_COLUMNS, _rows(started), title=f"lab {lab.name}"))
    rel = lab.inventory
    output.console.print(f"\nInventory written to {rel}. Reach the hosts over SSH with:\n"
                         f"  ansible -i {rel} all -m ping")

@lab_group.command("down")
@click.option("--name", help=_NAME_HELP)
@pass_app
def down(app: AppContext, name: str | None) -> None:
    """Remove the lab's containers and network (and nothing else)."""
    lab = Lab(app.site, name)
    result = lab.down()
    if not result.containers and not result.network:
        output.console.print(f"Nothing to remove: lab {lab.name} is not running.")
        return
    n = len(result.containers)
    net = f" and network {lab.name}" if result.network else ""
    output.console.print(f"Removed {n} container{'s' if n != 1 else ''}{net} of lab {lab.name}.")

@lab_group.command("status")
@click.option("--name", help=_NAME_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def status(app: AppContext, name: str | None, as_json: bool) -> None:
    """The lab's hosts, their state and addresses."""
    lab = Lab(app.site, name)
    st = lab.status()
    if as_json:
        output.print_json(st.to_json())
        return
    if not st.nodes:
        output.console.print(f"Lab {lab.name} is not running. Start it with `llmgw lab up`.")
        return
    output.console.print(output.table(_COLUMNS, _rows(st.nodes), title=f"lab {lab.name}"))


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [lab_group]
