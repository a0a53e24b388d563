"""`llmgw router serve`: the OpenAI gateway in front of the replicas of the state file.

The router's modules (FastAPI, uvicorn, aiohttp) load only when `serve` runs, so other
llmgw commands do not pay for them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from llmgw.cli.context import AppContext, pass_app
from llmgw.cli.keys_cmd import resolve_store_url, store_option
from llmgw.errors import UsageError
from llmgw.router import RouterSettings
from llmgw.router.settings import default_workers
from llmgw.site import SITE_FILE
from llmgw.store import open_store

if TYPE_CHECKING:
    from llmgw.router import RouterServer
    from llmgw.router.workers import Supervisor


def with_overrides(settings: RouterSettings, overrides: tuple[str, ...]) -> RouterSettings:
    """`settings` with each NAME=VALUE of --setting, typed like the field's default."""
    fields = {f.name: type(getattr(settings, f.name)) for f in dataclasses.fields(settings)}
    changes: dict[str, Any] = {}
    for item in overrides:
        name, sep, text = item.partition("=")
        kind = fields.get(name.strip())
        if not sep or kind is None:
            raise UsageError(f"--setting {item!r} is not NAME=VALUE with a router setting's name",
                             hint="names: " + ", ".join(sorted(fields)))
        try:
            value = kind(text.strip())
        except ValueError:
            raise UsageError(f"--setting {item!r}: {text.strip()!r} is not a {kind.__name__}") from None
        if isinstance(value, int | float) and value <= 0:
            raise UsageError(f"--setting {item!r}: must be above zero")
        changes[name.strip()] = value
    return dataclasses.replace(settings, **changes)


def _run(server: RouterServer | Supervisor) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        asyncio.run(server.run(install_signals=True))
    else:
        uvloop.run(server.run(install_signals=True))


def _workers(text: str) -> int:
    if text == "auto":
        return default_workers()
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"--workers {text!r} is not a number or `auto`") from None
    if not 1 <= n <= 256:
        raise UsageError(f"--workers {n} is out of range", hint="1 to 256, or `auto` (one per CPU)")
    return n


@click.group("router")
def router() -> None:
    """The OpenAI gateway in front of the replicas."""

@router.command("serve")
@click.option("--state", "state_path", type=click.Path(dir_okay=False, path_type=Path),
              help="State file to route by (default: the site's state file); reloaded when it changes.")
@click.option("--listen", default="0.0.0.0:8000", show_default=True, metavar="ADDR",
              help="Client listener (OpenAI API and the landing page).")
@click.option("--admin-listen", default="127.0.0.1:8001", show_default=True, metavar="ADDR",
              help="Admin listener (management API, /metrics); keep it on loopback.")
@click.option("--metrics-listen", metavar="ADDR", help="Optional listener serving only /metrics.")
@store_option
@click.option("--activator", metavar="MODULE:FACTORY",
              help="Start on-demand (min 0) models through this factory's Activator; "
                   "without it such models answer 503 while they have no replica.")
@click.option("--connect-timeout", type=float, default=RouterSettings.connect_timeout, show_default=True,
              help="Seconds to connect to a replica.")
@click.option("--first-byte-timeout", type=float, default=RouterSettings.first_byte_timeout,
              show_default=True, help="Seconds to the first response byte (whole generation when not "
                                      "streaming).")
@click.option("--chunk-gap-timeout", type=float, default=RouterSettings.chunk_gap_timeout,
              show_default=True, help="Longest silence inside a response, in seconds.")
@click.option("--max-body-mb", type=float, default=RouterSettings.max_body_bytes / 2**20,
              show_default=True, help="Largest request body, MiB.")
@click.option("--health-interval", type=float, default=RouterSettings.health_interval, show_default=True,
              help="Seconds between active health checks.")
@click.option("--activation-timeout", type=float, default=RouterSettings.activation_timeout,
              show_default=True, help="Seconds a request waits for an on-demand model to start.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@click.option("--workers", "workers_text", default="auto", show_default=True, metavar="N|auto",
              help="Worker processes sharing the client listener; auto: one per CPU this process may use.")
@click.option("--setting", "overrides", multiple=True, metavar="NAME=VALUE",
              help="Any other router setting (llmgw/router/settings.py), e.g. max_header_bytes=65536, "
                   "header_timeout=5, keep_alive_timeout=75, max_connections=8192; repeatable.")
@pass_app
def serve(app: AppContext, state_path: Path | None, listen: str, admin_listen: str,
          metrics_listen: str | None, store_url: str | None, activator: str | None,
          connect_timeout: float, first_byte_timeout: float, chunk_gap_timeout: float,
          max_body_mb: float, health_interval: float, activation_timeout: float, log_level: str,
          workers_text: str, overrides: tuple[str, ...]) -> None:
    """Serve the OpenAI API for the replicas in the state file, with keys, quotas and drains."""
    from llmgw.router import RouterServer
    from llmgw.router.plugins import load_activator
    from llmgw.router.server import parse_addr
    from llmgw.router.workers import Supervisor

    site = app.site if (app.directory / SITE_FILE).is_file() else None
    if state_path is None:
        if site is None:
            raise UsageError(f"no --state given and no site in {app.directory.resolve()}",
                             hint="pass --state FILE, or run in a site folder (or with -C DIR)")
        state_path = site.state_file
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = RouterSettings(connect_timeout=connect_timeout, first_byte_timeout=first_byte_timeout,
                              chunk_gap_timeout=chunk_gap_timeout, max_body_bytes=int(max_body_mb * 2**20),
                              health_interval=health_interval, activation_timeout=activation_timeout)
    settings = with_overrides(settings, overrides)
    workers = _workers(workers_text.strip().lower())
    url = resolve_store_url(app, store_url)
    store = open_store(url)
    try:
        client_addr = parse_addr(listen, default_host="0.0.0.0")
        admin_addr = parse_addr(admin_listen, default_host="127.0.0.1")
        metrics_addr = parse_addr(metrics_listen, default_host="0.0.0.0") if metrics_listen else None
        site_dir = site.root if site is not None else None
        loaded = load_activator(activator, state_path, site_dir) if activator else None
        server: RouterServer | Supervisor
        if workers == 1:
            server = RouterServer(state_path=state_path.resolve(), store=store, listen=client_addr,
                                  admin_listen=admin_addr, metrics_listen=metrics_addr, settings=settings,
                                  site_dir=site_dir, activator=loaded)
        else:  # workers.py: N processes on one address, this one answering the admin API for all
            server = Supervisor(workers=workers, state_path=state_path.resolve(), store=store, store_url=url,
                                listen=client_addr, admin_listen=admin_addr, metrics_listen=metrics_addr,
                                settings=settings, site_dir=site_dir, activator=loaded,
                                activator_spec=activator, log_level=log_level)
        _run(server)
    finally:
        store.close()


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [router]
