"""`llmgw check MODEL`: capability checks through the router (llmgw.probe.checks), stored
with the engine version. Exits 1 when a required capability does not pass: the model's
catalog `requires:`, or those named with --only."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import click

from llmgw.catalog import CAPABILITIES
from llmgw.cli import output
from llmgw.cli.bench_cmd import key_file_option, router_url_option
from llmgw.cli.context import AppContext, pass_app
from llmgw.cli.keys_cmd import resolve_store_url, store_option
from llmgw.errors import LlmgwError


def _catalog_requires(app: AppContext, model: str) -> list[str]:
    """The model's `requires:` from the site's catalog; an empty list without a catalog entry."""
    from llmgw.catalog import load_catalog

    site = app.site
    if not site.catalog_dir.is_dir():
        return []
    entry = next((m for m in load_catalog(site.catalog_dir, root=site.root) if m.name == model), None)
    return list(entry.requires) if entry is not None else []


@click.command("check")
@click.argument("model")
@click.option("--only", "only", multiple=True, type=click.Choice(CAPABILITIES), metavar="CAP",
              help=f"Check only this (repeatable; these are then required): {', '.join(CAPABILITIES)}.")
@router_url_option
@key_file_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def check(app: AppContext, model: str, only: tuple[str, ...], router_url: str | None, key_file: Path | None,
          store_url: str | None, as_json: bool) -> None:
    """Check MODEL through the router: chat, stream, completion, embeddings, a tool-call round trip and
    JSON mode; pass/fail stored with the engine version (shown by `llmgw models MODEL`)."""
    import httpx

    from llmgw.probe import run_checks, target
    from llmgw.state import read_state
    from llmgw.store import CheckRecord, open_store

    site = app.site
    served = target.served_by(read_state(site.state_file), model)
    required = list(only) or _catalog_requires(app, served.model)
    url = target.router_url(site, router_url)
    key = target.api_key(key_file)
    store = open_store(resolve_store_url(app, store_url))
    click.get_current_context().call_on_close(store.close)
    with output.err_console.status(f"Checking {served.model} through {url}"), httpx.Client() as client:
        results, fingerprint = run_checks(client, url, key, served.model, list(only) or CAPABILITIES)
    now = datetime.now(UTC)
    run_id = secrets.token_hex(6)
    version = target.engine_version(served.engine, fingerprint)
    store.add_checks([CheckRecord(run_id=run_id, model=served.model, capability=c.capability, status=c.status,
                                  detail=c.detail, profiles=served.profiles, engine=served.engine,
                                  engine_version=version, nodes=served.nodes, created_at=now)
                      for c in results])
    missing = [c.capability for c in results if c.capability in required and c.status != "pass"]
    if as_json:
        output.print_json({"run_id": run_id, "model": served.model, "profiles": served.profiles,
                           "engine": served.engine, "engine_version": version, "nodes": served.nodes,
                           "router": url, "created_at": now.isoformat(), "required": required,
                           "checks": [{**c.as_json(), "required": c.capability in required} for c in results],
                           "store": store.redacted_url})
    else:
        colour = {"pass": "green", "fail": "red", "unsupported": "yellow"}
        rows = [[c.capability, f"[{colour[c.status]}]{c.status}[/]", "yes" if c.capability in required else "-",
                 c.detail] for c in results]
        output.console.print(output.table(
            ["CAPABILITY", "STATUS", "REQUIRED", "DETAIL"], rows,
            title=f"{served.model} on {served.profiles} ({served.engine} {version}; {served.nodes})"))
        output.console.print(f"Stored as check run {run_id} in {store.redacted_url}.", markup=False)
    if missing:
        raise LlmgwError(f"{served.model} lacks required capabilities: {', '.join(missing)}",
                         hint="the DETAIL column says why; `requires:` in the catalog lists what is required")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [check]
