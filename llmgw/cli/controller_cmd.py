"""`llmgw controller run|runs` and `llmgw approve RUN`: pull-style GitOps on the bastion."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.controller.checkout import RUNTIME_ENV, default_runtime
from llmgw.site import Site
from llmgw.state import backend_for, default_author


def runtime_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--runtime-dir", "runtime", type=click.Path(file_okay=False, path_type=Path), envvar=RUNTIME_ENV,
        help="The controller's own folder, outside the site folder: its state (or a PostgreSQL state's last "
             "copy), runs, engine key secret and store. Default: ~/.local/state/llmgw-controller.")(f)


def _runtime(given: Path | None) -> Path:
    return given if given is not None else default_runtime()


def _controller_site(app: AppContext, runtime: Path | None) -> Site:
    """The site as the controller sees it: its state and runs in its runtime folder."""
    return Site.load(app.site.root, runtime=_runtime(runtime))


@click.group("controller")
def controller_group() -> None:
    """Follow the site's git branch: plan each commit, apply what policy allows, keep the runs."""


@controller_group.command("run")
@click.option("--branch", default="main", show_default=True, help="The branch of the site's repository to follow.")
@click.option("--remote", default="origin", show_default=True, help="The remote the site folder fetches from.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds between looks at the branch.")
@click.option("--policy", type=click.Choice(["auto", "approve", "auto-all"]), default="auto", show_default=True,
              help="auto: apply plans that destroy nothing and start no replica that newly runs the model's "
                   "own code (trust_remote_code), the rest waits for `llmgw approve`; approve: every plan "
                   "waits; auto-all: apply everything. A rewind of the branch waits under every policy.")
@click.option("--grace", type=click.FloatRange(min=0), default=120.0, show_default=True,
              help="Seconds drained replicas get to finish their requests.")
@click.option("--listen", default="127.0.0.1:8095", show_default=True, metavar="ADDR",
              help="Admin API (status, runs, approval); keep it on loopback.")
@click.option("--demand-listen", metavar="ADDR",
              help="The routers' demand API (load reports, activation requests; a token apply gives the "
                   "routers): an address the routers reach. Default: none (no demand-driven scaling).")
@click.option("--demand-interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between looks at the routers' load (an activation request is acted on at once).")
@click.option("--no-follow", is_flag=True,
              help="Follow no git branch: use the site folder as it is (demand-driven scaling alone; the state "
                   "stays where the site says unless --runtime-dir is given).")
@runtime_option
@pass_app
def run_cmd(app: AppContext, branch: str, remote: str, interval: float, policy: str, grace: float,
            listen: str, demand_listen: str | None, demand_interval: float, no_follow: bool,
            runtime: Path | None) -> None:
    """Run the controller in the foreground (the llmgw_controller role runs it under systemd).

    The site folder (-C) is a clone of the site's repository, holding the commit last applied;
    each new commit of BRANCH is planned in a fresh checkout in the runtime folder, where the
    controller's state, runs and secrets live. With a PostgreSQL state, several controllers
    elect one leader."""
    import uvicorn

    from llmgw.controller import Controller
    from llmgw.controller.api import controller_app
    from llmgw.router.server import parse_addr

    host, port = parse_addr(listen, default_host="127.0.0.1")
    own = runtime if no_follow else _runtime(runtime)
    controller = Controller(app.site.root, branch=None if no_follow else branch, remote=remote, policy=policy,
                            grace=grace, runtime=own, say=lambda line: click.echo(line, err=True))
    server = uvicorn.Server(uvicorn.Config(controller_app(controller), host=host, port=port, log_level="warning",
                                           access_log=False))
    api = threading.Thread(target=server.run, name="llmgw-controller-api", daemon=True)
    api.start()
    servers = [(server, api)]
    if demand_listen:
        from llmgw.apply.controller_token import router_token_for
        from llmgw.controller.api import demand_app

        token = router_token_for(Site.load(app.site.root, runtime=controller.runtime).state_file)
        d_host, d_port = parse_addr(demand_listen, default_host="127.0.0.1")
        d_server = uvicorn.Server(uvicorn.Config(demand_app(controller, lambda: token), host=d_host, port=d_port,
                                                 log_level="warning", access_log=False))
        d_thread = threading.Thread(target=d_server.run, name="llmgw-controller-demand", daemon=True)
        d_thread.start()
        servers.append((d_server, d_thread))
        click.echo(f"demand API for the routers on http://{d_host}:{d_port}", err=True)
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    following = "no branch" if no_follow else f"{remote}/{branch} every {interval:g} s"
    click.echo(f"{controller.name}: following {following}, policy {policy}; admin API on http://{host}:{port}",
               err=True)
    try:
        controller.serve_forever(interval, stop, demand_interval=demand_interval)
    finally:
        for srv, thread in servers:
            srv.should_exit = True
            thread.join(10)
        controller.backend.close()


@controller_group.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@runtime_option
@pass_app
def runs_cmd(app: AppContext, as_json: bool, runtime: Path | None) -> None:
    """The controller's runs, newest first: commit, plan summary, result."""
    from llmgw.controller import runs_for

    with backend_for(_controller_site(app, runtime)) as backend:
        runs = runs_for(backend).all()
    if as_json:
        output.print_json({"runs": [r.as_json() for r in runs]})
        return
    output.console.print(output.table(["RUN", "COMMIT", "STATUS", "PLAN", "UPDATED", "APPROVED BY"],
                                      [[str(r.id), r.commit[:12], r.status, r.summary, r.updated_at,
                                        r.approved_by or "-"] for r in runs]))


@click.command("approve")
@click.argument("run_id", type=click.IntRange(min=1))
@runtime_option
@pass_app
def approve_cmd(app: AppContext, run_id: int, runtime: Path | None) -> None:
    """Approve controller run RUN_ID (a plan that destroys something); the leader applies it next."""
    from llmgw.controller import runs_for

    with backend_for(_controller_site(app, runtime)) as backend:
        run = runs_for(backend).approve(run_id, default_author())
    click.echo(f"Approved run {run.id} ({run.commit[:12]}: {run.summary}); the controller applies it next.")


# What `llmgw` attaches to its group.
COMMANDS: list[click.Command] = [controller_group, approve_cmd]
