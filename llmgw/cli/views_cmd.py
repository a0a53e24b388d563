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
from rich.console import Console
from rich.text import Text

from llmgw.cli import hub_cmd, output
from llmgw.cli.context import AppContext, pass_app
from llmgw.cli.models_detail import MODEL_ARG, ModelsGroup, show_model
from llmgw.errors import LlmgwError, RunnerError, StateError, UsageError
from llmgw.views.defaults import DEFAULT_ADMIN, IDLE_AFTER

# The views themselves (the planner, the fabrics, httpx) are imported inside the commands
# that run them, so `llmgw --help` and every other command start without them.
if TYPE_CHECKING:
    from llmgw.state import StateBackend
    from llmgw.views import Runtime, SiteData

NEVER = "-"

F = TypeVar("F", bound=Callable[..., Any])
BAR_WIDTH = 30
BAR_STYLE = {"used": ("█", "cyan"), "free": ("░", "green"), "held_back": ("▒", "yellow"),
             "unhealthy": ("\u00d7", "red"), "empty": (" ", "")}


def router_options(fn: F) -> F:
    fn = click.option("--no-router", is_flag=True, help="Do not ask any router (idle and in-flight print as ?).")(fn)
    fn = click.option("--router", "routers", multiple=True, metavar="URL",
                      help="A router's admin API (repeatable; default $LLMGW_ROUTERS, else the inventory's "
                           f"llmgw_routers through SSH tunnels, else {DEFAULT_ADMIN}).")(fn)
    return fn


def get_runtime(data: SiteData, routers: Sequence[str], no_router: bool) -> Runtime:
    from llmgw.views.runtime import Runtime, Target, fetch_runtime
    from llmgw.views.tunnel import routes_for

    if no_router:
        return Runtime.unknown("routers not asked (--no-router)")
    urls = list(routers) or [u.strip() for u in os.environ.get("LLMGW_ROUTERS", "").split(",") if u.strip()]
    if urls:
        return fetch_runtime(urls)
    hosts = data.inventory.routers
    if hosts and not data.site.config.recorded:  # a recorded site's hosts are not the operator's
        targets: list[Target] = list(routes_for([hosts[n] for n in sorted(hosts)]))
        return fetch_runtime(targets)
    return fetch_runtime([DEFAULT_ADMIN])


def _console() -> Console:
    """A console sized now (COLUMNS read per command, so tests and pipes get their width)."""
    return Console(highlight=False, soft_wrap=False)


def _notes(con: Console, notes: Sequence[str]) -> None:
    if notes:
        con.print()
        for n in notes:
            con.print(f"[dim]Note: {Text(n).plain}[/]", soft_wrap=False, markup=True, overflow="fold")


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                under: Sequence[Sequence[str]] | None = None) -> list[str]:
    """Left-aligned columns two spaces apart; `under[i]` are lines printed beneath row i."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(headers)]
    for i, r in enumerate(rows):
        out.append(line(r))
        for extra in (under[i] if under else ()):
            out.append(f"  {extra}")
    return out


# ------------------------------------------------------------------------------ status


def status_text(view: dict[str, Any], con: Console) -> None:
    from llmgw.views.text import bar_cells, duration

    con.print("[bold]GPU capacity[/]  [cyan]█ used[/] [green]░ free[/] [yellow]▒ held back[/] "
              "(cordoned/draining)  [red]\u00d7 unhealthy[/]")
    caps = view["capacity"]
    name_w = max([len(c["gpu_class"]) for c in caps] + [5])
    con.print(f"  {'CLASS'.ljust(name_w)}  {' ' * BAR_WIDTH}  USED  FREE  HELD  BAD  TOTAL", style="bold")
    for c in caps:
        bar = Text()
        parts = [("used", c["used"]), ("free", c["free"]), ("held_back", c["held_back"]),
                 ("unhealthy", c["unhealthy"])]
        for kind, n in bar_cells(parts, BAR_WIDTH):
            ch, style = BAR_STYLE[kind]
            bar.append(ch * n, style=style)
        row = Text(f"  {c['gpu_class'].ljust(name_w)}  ")
        row.append(bar)
        row.append(f"  {c['used']:>4}  {c['free']:>4}  {c['held_back']:>4}  {c['unhealthy']:>3}  {c['total']:>5}")
        con.print(row)
    if view["gpus_unknown"]:
        con.print(Text(f"  GPUs not known on {len(view['gpus_unknown'])} nodes: "
                       f"{', '.join(view['gpus_unknown'])}", style="dim"), overflow="fold")
    con.print()
    con.print("[bold]Fabrics[/]  (free whole nodes: ready, every GPU healthy and free)")
    if not view["fabrics"]:
        con.print("  none known")
    for f in view["fabrics"]:
        extra = []
        if f["degraded_links"]:
            extra.append(f"{f['degraded_links']} degraded cable{'s' if f['degraded_links'] != 1 else ''}")
        extra.append(f"rails {f['rails']}")
        con.print(Text(f"  {f['fabric']}  {','.join(f['gpu_classes']) or '-':<10} "
                       f"{f['free_whole_nodes']:>3} of {f['nodes']:<3} free   {', '.join(extra)}"))
    con.print()
    n, r, m = view["nodes"], view["replicas"], view["models"]
    node_line = f"{n['total']}: {n['ready']} ready, {n['cordoned']} cordoned, {n['draining']} draining"
    if n["stale"]:
        node_line += f"; stale facts: {', '.join(n['stale'])}"
    if n["no_facts"]:
        node_line += f"; no facts: {', '.join(n['no_facts'])}"
    con.print(Text("Nodes     ", style="bold") + Text(node_line), overflow="fold")
    rep_line = f"{r['total']}: {r['ready']} ready, {r['starting']} starting, {r['draining']} draining"
    if r["with_errors"]:
        rep_line += f"; {r['with_errors']} with errors (llmgw replicas)"
    con.print(Text("Replicas  ", style="bold") + Text(rep_line))
    con.print(Text("Models    ", style="bold") + Text(
        f"{m['total']}: {m['ready']} ready, {m['starting']} starting, {m['not placed']} not placed, "
        f"{m['stopped']} stopped, {m['on demand']} on demand"), overflow="fold")
    if view["unplaceable"]:
        con.print()
        con.print(f"[bold red]Cannot be placed[/] ({len(view['unplaceable'])}; `llmgw explain MODEL` says why):")
        w = max(len(u["model"]) for u in view["unplaceable"])
        for u in view["unplaceable"]:
            con.print(Text(f"  {u['model'].ljust(w)}  {u['placed']}/{u['wanted']}  {u['reason']}"), overflow="fold")
    _live_text(view, con)
    con.print()
    idle_after = duration(view["idle_after_seconds"])
    if view["idle"] is None and view["routers_not_known"] and view["routers"]:
        con.print(Text.from_markup(f"[bold]Idle replicas[/] (no request for {idle_after}): not known, "
                                   f"router {', '.join(view['routers_not_known'])} did not answer"))
    elif view["idle"] is None:
        con.print(f"[bold]Idle replicas[/] (no request for {idle_after}): not known, no router answered")
    elif not view["idle"]:
        con.print(f"[bold]Idle replicas[/] (no request for {idle_after}): none")
    else:
        con.print(f"[bold]Idle replicas[/] (no request for {idle_after}): {len(view['idle'])}")
        for i in view["idle"]:
            how = f"idle {duration(i['idle_seconds'])}" if i["used"] else f"never used in {duration(i['age_seconds'])}"
            con.print(Text(f"  {i['id']}  ({i['model']})  {how}"))
    _notes(con, view["notes"])


LIVE_ROWS = 20  # replicas listed under "Live" in `llmgw status`; `llmgw replicas` lists them all


def _live_text(view: dict[str, Any], con: Console) -> None:
    """Each replica's in-flight requests and idle time, from the routers that answered."""
    from llmgw.views.replicas import idle_text

    live = view.get("live")
    if live is None:
        return
    con.print()
    routers = ", ".join(view["routers"]) + (f"; not known: {', '.join(view['routers_not_known'])}"
                                            if view["routers_not_known"] else "")
    con.print(Text.from_markup(f"[bold]Live[/] ({view['in_flight']}{'+' if view['routers_not_known'] else ''} "
                               f"in flight; routers asked: ") + Text(routers + ")"), overflow="fold")
    if not live:
        con.print("  no replicas")
        return
    shown = sorted(live, key=lambda r: -(r["in_flight"] or 0))[:LIVE_ROWS]
    partial = bool(view["routers_not_known"])
    rows = [[r["id"], r["state"], f"{r['in_flight']}{'+' if partial else ''}", idle_text(r)] for r in shown]
    for line in plain_table(["REPLICA", "STATE", "IN-FLIGHT", "IDLE"], rows):
        con.print(Text(f"  {line}"), overflow="fold")
    if len(live) > len(shown):
        con.print(Text(f"  ... {len(live) - len(shown)} more (`llmgw replicas`)", style="dim"))


# ------------------------------------------------------------------------------ replicas


def in_flight_text(rec: dict[str, Any]) -> str:
    """Requests in flight now; `?` when no router answered, `N+` when some did not."""
    if rec["in_flight"] is None:
        return "?"
    return f"{rec['in_flight']}+" if rec.get("in_flight_partial") else str(rec["in_flight"])


def replicas_text(view: dict[str, Any], con: Console) -> None:
    from llmgw.views.replicas import idle_text
    from llmgw.views.text import duration

    recs = view["replicas"]
    if not recs:
        which = f" of {view['model']}" if view["model"] else ""
        con.print(f"No replicas{which} in the state (serial {view['serial']}).")
        _notes(con, view["notes"])
        return
    rows = [[r["id"], " ".join(s["text"] for s in r["shards"]), r["state"],
             duration(r["age_seconds"]) if r["age_seconds"] is not None else NEVER, idle_text(r),
             in_flight_text(r), r["endpoint"]]
            for r in recs]
    under = [[d["text"] for d in r["downloads"]] for r in recs]
    for line in plain_table(["REPLICA", "SHARDS", "STATE", "AGE", "IDLE", "IN-FLIGHT", "ENDPOINT"], rows, under):
        con.print(Text(line), overflow="fold")
    errs = [(r["id"], e) for r in recs for e in r["errors"]]
    if errs:
        con.print()
        con.print("[bold red]Errors:[/]")
        for rid, e in errs:
            con.print(Text(f"  {rid}: {e}"), overflow="fold")
    _notes(con, view["notes"])


# ------------------------------------------------------------------------------ models


def models_text(view: dict[str, Any], con: Console) -> None:
    rows = [[m["name"], ", ".join(m["aliases"]) or "-", m["serving"], m["replicas_text"], m["status"]]
            for m in view["models"]]
    for line in plain_table(["MODEL", "ALIASES", "SERVING", "REPLICAS", "STATUS"], rows):
        con.print(Text(line), overflow="fold")
    what = {"not placed": "`llmgw explain MODEL` says why", "stopped": "`llmgw apply` starts it",
            "starting": "wait, or `llmgw replicas` shows progress"}
    present = [s for s in what if view["counts"].get(s)]
    if present:
        con.print()
        for s in present:
            con.print(Text(f"{s}: {what[s]}", style="dim"))
    from llmgw.views.demand import demand_lines

    scaled = demand_lines(view.get("demand", {}))
    if scaled:  # the controller's last scale decision per model (#16)
        con.print()
        con.print(Text("Demand (the controller's last decisions):"))
        for line in scaled:
            con.print(Text(f"  {line}"), overflow="fold")
    _notes(con, view["notes"])


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
def status(app: AppContext, as_json: bool, idle_after: float, routers: tuple[str, ...], no_router: bool) -> None:
    """The fleet at a glance: GPU capacity, free nodes per fabric, counts, what cannot be placed."""
    from llmgw.state.summary import site_state_summary, summary_line
    from llmgw.views import load_site_data
    from llmgw.views.status import status_view

    data = load_site_data(app.site)
    view = status_view(data, get_runtime(data, routers, no_router), datetime.now(UTC), idle_after=idle_after)
    view["state"] = site_state_summary(app.site, _controller_runs)
    if as_json:
        output.print_json(view)
    else:
        status_text(view, _console())
        click.echo(summary_line(view["state"]))
        for r in view["state"].get("controller_runs", []):
            click.echo(f"  controller run {r['id']} ({r['commit'][:12]}): {r['status']}, {r['summary']}")

# A group so `models search` and `models inspect` (llmgw.cli.hub_cmd) browse the Hub beside it;
# `llmgw models` alone is the view.
@click.group("models", cls=ModelsGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@router_options
@pass_app
def models(app: AppContext, as_json: bool, routers: tuple[str, ...], no_router: bool) -> None:
    """Every model: who answers it now, replicas ready of min, and what to do about it.

    `llmgw models MODEL`: that model, with its stored `llmgw bench` and `llmgw check` results."""
    if click.get_current_context().invoked_subcommand is not None:
        return
    from llmgw.views import load_site_data
    from llmgw.views.models import models_view

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
        models_text(view, _console())

models.add_command(hub_cmd.search)
models.add_command(hub_cmd.inspect)


@click.command("replicas")
@click.option("--model", "model", metavar="MODEL", help="Only this model's replicas (name or alias).")
@click.option("--downloads", is_flag=True,
              help="Ask the nodes of starting replicas (through Ansible) how far their weights downloads got.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@router_options
@pass_app
def replicas(app: AppContext, model: str | None, downloads: bool, as_json: bool, routers: tuple[str, ...],
             no_router: bool) -> None:
    """Every replica: shards (node:GPUs), state, age, idle time, endpoint; errors beneath."""
    from llmgw.views import load_site_data
    from llmgw.views.downloads import fetch_downloads
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
        replicas_text(view, _console())

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
    con = _console()
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
