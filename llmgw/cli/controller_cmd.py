"""`llmgw controller run|runs`: pull-style GitOps on the bastion (`llmgw approve RUN`: approve_cmd.py)."""

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
from llmgw.controller.operators import ADMIN_LISTEN
from llmgw.errors import UsageError
from llmgw.site import Site
from llmgw.state.select import backend_for


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
@click.option("--listen", default=ADMIN_LISTEN, show_default=True, metavar="ADDR",
              help="Admin API (status, runs, approval with an operator token); keep it on loopback.")
@click.option("--demand-listen", metavar="ADDR",
              help="The routers' demand API (load reports, activation requests; each router shows its own token "
                   "from apply): an address the routers reach. Default: none (no demand-driven scaling).")
@click.option("--demand-tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="PEM",
              help="Serve the demand API over TLS with this certificate (chain); the routers verify it "
                   "(https:// in llmgw_router_controller_url, their CA in $LLMGW_CONTROLLER_CA).")
@click.option("--demand-tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="PEM",
              help="The TLS certificate's private key (readable by the controller alone).")
@click.option("--demand-interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between looks at the routers' load (an activation request is acted on at once).")
@click.option("--no-follow", is_flag=True,
              help="Follow no git branch: use the site folder as it is (demand-driven scaling alone; the state "
                   "stays where the site says unless --runtime-dir is given).")
@runtime_option
@pass_app
def run_cmd(app: AppContext, branch: str, remote: str, interval: float, policy: str, grace: float,
            listen: str, demand_listen: str | None, demand_tls_cert: Path | None, demand_tls_key: Path | None,
            demand_interval: float, no_follow: bool, runtime: Path | None) -> None:
    """Run the controller in the foreground (the llmgw_controller role runs it under systemd).

    The site folder (-C) is a clone of the site's repository, holding the commit last applied;
    each new commit of BRANCH is planned in a fresh checkout in the runtime folder, where the
    controller's state, runs and secrets live. With a PostgreSQL state, several controllers
    elect one leader."""
    import uvicorn

    if (demand_tls_cert is None) != (demand_tls_key is None):
        raise UsageError("give --demand-tls-cert and --demand-tls-key together")

    from llmgw.controller import Controller, operators
    from llmgw.controller.api import controller_app, listener_names
    from llmgw.router.server import parse_addr

    host, port = parse_addr(listen, default_host="127.0.0.1")

    def say(line: str) -> None:
        click.echo(line, err=True)

    own = runtime if no_follow else _runtime(runtime)
    admins = operators.ensure(operators.controller_home(), say=say)  # approval needs an operator's token
    controller = Controller(app.site.root, branch=None if no_follow else branch, remote=remote, policy=policy,
                            grace=grace, runtime=own, say=say)
    server = uvicorn.Server(uvicorn.Config(controller_app(controller, operators=admins,
                                                          hosts=listener_names(host)),
                                           host=host, port=port, log_level="warning", access_log=False))
    api = threading.Thread(target=server.run, name="llmgw-controller-api", daemon=True)
    api.start()
    servers = [(server, api)]
    if demand_listen:
        from llmgw.apply.engine_keys import EngineKeyring
        from llmgw.controller.api import demand_app

        # each router's token is derived from the engine key secret, kept in the runtime folder
        keyring = EngineKeyring.beside(Site.load(app.site.root, runtime=controller.runtime).state_file)
        d_host, d_port = parse_addr(demand_listen, default_host="127.0.0.1")
        d_server = uvicorn.Server(uvicorn.Config(demand_app(controller, keyring), host=d_host, port=d_port,
                                                 log_level="warning", access_log=False,
                                                 ssl_certfile=demand_tls_cert, ssl_keyfile=demand_tls_key))
        d_thread = threading.Thread(target=d_server.run, name="llmgw-controller-demand", daemon=True)
        d_thread.start()
        servers.append((d_server, d_thread))
        scheme = "https" if demand_tls_cert else "http"
        click.echo(f"demand API for the routers on {scheme}://{d_host}:{d_port}", err=True)
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


# What `llmgw` attaches to its group.
COMMANDS: list[click.Command] = [controller_group]
