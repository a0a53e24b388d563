"""`llmgw status`, `llmgw models`, `llmgw replicas` and `llmgw logs`: the fleet at a glance.

Each prints what `llmgw.views` computes (the dashboard renders the same dicts), as text
for people or, with `--json`, as the dicts themselves.

Router data (in-flight counts, last use, health) comes from the routers' admin API over
HTTP: `--router URL` (repeatable; or $LLMGW_ROUTERS, comma-separated); by default every
host of the inventory's `llmgw_routers`, each through an SSH tunnel llmgw opens for the
call and closes after it, as Ansible reaches that host (llmgw.views.tunnel: the admin
listener stays on the router host's loopback); on a site without routers (or a recorded
one), http://127.0.0.1:8001, a router on this host. Routers are asked at once, each
bounded in time. A router that does not answer is a note naming it, and what only it
knows prints as `?`, never as idle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from llmgw import collector
from llmgw.cli import hub_cmd, output
from llmgw.cli.context import AppContext, pass_app
from llmgw.cli.models_detail import MODEL_ARG, ModelsGroup, show_model
from llmgw.errors import LlmgwError, RunnerError, StateError, UsageError
from llmgw.views import DEFAULT_ADMIN, IDLE_AFTER

# The views themselves (the planner, the fabrics, httpx) are imported inside the commands
# that run them, so `llmgw --help` and every other command start without them; their text
# (rich, llmgw.cli.views_text) where it is printed, so `--json` starts without it.
if TYPE_CHECKING:
    from llmgw.state import StateBackend
    from llmgw.views import Runtime, SiteData


F = TypeVar("F", bound=Callable[..., Any])


def router_options(fn: F) -> F:
    fn = click.option("--no-router", is_flag=True, help="Do not ask any router (idle and in-flight print as ?).")(fn)
    fn = click.option("--router", "routers", multiple=True, metavar="URL",
                      help="A router's admin API (repeatable; default $LLMGW_ROUTERS, else the inventory's "
                           f"llmgw_routers through SSH tunnels, else {DEFAULT_ADMIN}).")(fn)
    return fn


def get_runtime(data: SiteData, routers: Sequence[str], no_router: bool) -> Runtime:
    from llmgw.views import Runtime
    from llmgw.views.ask_routers import Target, fetch_runtime
    from llmgw.views.tunnel import routes_for

    if no_router:
        return Runtime.unknown("routers not asked (--no-router)")
    urls = list(routers) or [u.strip() for u in os.environ.get("LLMGW_ROUTERS", "").split(",") if u.strip()]
    if urls:
        return fetch_runtime(urls)
    hosts = data.inventory.routers
    if hosts and not data.site.config.recorded:  # a recorded site's hosts are not the operator's
        targets: list[Target] = list(routes_for([hosts[n] for n in sorted(hosts)], data.site.known_hosts))
        return fetch_runtime(targets)
    return fetch_runtime([DEFAULT_ADMIN])


def _controller_runs(backend: StateBackend) -> dict[str, Any]:
    """The controller's last runs, for `llmgw status`."""
    from llmgw.controller import runs_for

    try:
        return {"controller_runs": [r.as_json() for r in runs_for(backend, create=False).all()[:5]]}
    except LlmgwError as exc:
        return {"controller_runs": [], "controller_error": exc.message}


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--idle-after", type=float, default=IDLE_AFTER, show_default=True, metavar="SECONDS",
              help="A ready replica with no request for this long counts as idle.")
@router_options
@pass_app
@collector.paused()  # a short-lived process: see llmgw.collector
def status(app: AppContext, as_json: bool, idle_after: float, routers: tuple[str, ...], no_router: bool) -> None:
    """The fleet at a glance: GPU capacity, free nodes per fabric, counts, what cannot be placed."""
    from llmgw.state.summary import site_state_summary, summary_line
    from llmgw.views.planned import load_site_data
    from llmgw.views.status import status_view

    data = load_site_data(app.site)
    view = status_view(data, get_runtime(data, routers, no_router), datetime.now(UTC), idle_after=idle_after)
    view["state"] = site_state_summary(app.site, _controller_runs)
    if as_json:
        output.print_json(view)
    else:
        from llmgw.cli.views_text import console, status_text

        status_text(view, console())
        click.echo(summary_line(view["state"]))
        for r in view["state"].get("controller_runs", []):
            click.echo(f"  controller run {r['id']} ({r['commit'][:12]}): {r['status']}, {r['summary']}")

# A group so `models search` and `models inspect` (llmgw.cli.hub_cmd) browse the Hub beside it;
# `llmgw models` alone is the view.
@click.group("models", cls=ModelsGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@router_options
@pass_app
@collector.paused()  # a short-lived process: see llmgw.collector
def models(app: AppContext, as_json: bool, routers: tuple[str, ...], no_router: bool) -> None:
    """Every model: who answers it now, replicas ready of min, and what to do about it.

    `llmgw models MODEL`: that model, with its stored `llmgw bench` and `llmgw check` results."""
    if click.get_current_context().invoked_subcommand is not None:
        return
    from llmgw.views.models import models_view
    from llmgw.views.planned import load_site_data

    data = load_site_data(app.site)
    view = models_view(data, get_runtime(data, routers, no_router))
    from llmgw.controller.views import site_demand  # the controller's scale decisions (#16)

    view["demand"] = site_demand(app.site)
    name = click.get_current_context().meta.get(MODEL_ARG)
    if name is not None:  # one model, with its bench and check results (llmgw.cli.models_detail)
        show_model(app, view, name, as_json)
        return
    if as_json:
        output.print_json(view)
    else:
        from llmgw.cli.views_text import console, models_text

        models_text(view, console())

models.add_command(hub_cmd.search)
models.add_command(hub_cmd.inspect)


@click.command("replicas")
@click.option("--model", "model", metavar="MODEL", help="Only this model's replicas (name or alias).")
@click.option("--downloads", is_flag=True,
              help="Ask the nodes of starting replicas (through Ansible) how far their weights downloads got.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@router_options
@pass_app
@collector.paused()  # a short-lived process: see llmgw.collector
def replicas(app: AppContext, model: str | None, downloads: bool, as_json: bool, routers: tuple[str, ...],
             no_router: bool) -> None:
    """Every replica: shards (node:GPUs), state, age, idle time, endpoint; errors beneath."""
    from llmgw.views.downloads import fetch_downloads
    from llmgw.views.planned import load_site_data
    from llmgw.views.replicas import replicas_view

    data = load_site_data(app.live_site("replicas --downloads") if downloads else app.site)
    if model is not None and data.catalog.resolve(model) is None and \
            not any(r.model == model for r in data.state.replicas):
        raise UsageError(f"no model {model!r} in the catalog or the state",
                         hint="`llmgw models` lists them")
    view = replicas_view(data, get_runtime(data, routers, no_router), datetime.now(UTC), model=model,
                         downloads=fetch_downloads(data) if downloads else None)
    if as_json:
        output.print_json(view)
    else:
        from llmgw.cli.views_text import console, replicas_text

        replicas_text(view, console())

@click.command("logs")
@click.argument("replica")
@click.option("--lines", "-n", type=click.IntRange(1, 100000), default=100, show_default=True,
              help="Journal lines per shard.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@pass_app
def logs(app: AppContext, replica: str, lines: int, as_json: bool) -> None:
    """The journal of each of REPLICA's shards (journalctl on each shard's node, through Ansible)."""
    from llmgw.state import read_state
    from llmgw.views.logs import fetch_logs

    state = read_state(app.site.state_file)
    rec = state.replica(replica)
    if rec is None:
        known = ", ".join(r.id for r in state.replicas) or "none"
        raise StateError(f"no replica {replica!r} in the state (serial {state.serial})",
                         hint=f"replicas: {known}")
    result = fetch_logs(app.live_site("logs"), rec, lines)
    if as_json:
        output.print_json(result)
        return
    from rich.text import Text

    from llmgw.cli.views_text import console

    con = console()
    for s in result["shards"]:
        con.print(f"[bold]==> {s['node']} {s['unit']} (shard {s['rank']}) <==[/]")
        if s["error"]:
            con.print(Text(f"could not read the journal: {s['error']}", style="red"), overflow="fold")
        for ln in s["lines"]:
            con.print(Text(ln), overflow="fold")
    failed = [s for s in result["shards"] if s["error"]]
    if failed:
        raise RunnerError(f"could not read the journal of {len(failed)} of {len(result['shards'])} shards",
                          hint="the lines above say why, per shard")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [status, models, replicas, logs]
