"""`llmgw bench MODEL`: load a model through the router, report and store how fast it runs.

The figures are stored per model with the profiles, engine version and nodes serving it
(from the state), so `llmgw models MODEL` compares profiles and shows a regression after
an engine upgrade. The router and the key: llmgw.probe.target (the key never as an
option's value: $LLMGW_API_KEY or --key-file).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.cli.keys_cmd import resolve_store_url, store_option
from llmgw.errors import LlmgwError, UsageError

router_url_option = click.option(
    "--router-url", metavar="URL",
    help="The router's client API (default $LLMGW_ROUTER_URL, else the inventory's first llmgw_routers host, "
         "port 8000).")
key_file_option = click.option(
    "--key-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
    help="A file holding the API key (default: $LLMGW_API_KEY).")


def figures_rows(fig: dict[str, Any]) -> list[list[str]]:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f} ms"

    rows = [["requests", f"{fig['requests']} ({fig['ok']} ok, {fig['errors']} errors)"],
            ["duration", f"{fig['duration_s']:.1f} s"],
            ["TTFT p50 / p90", f"{ms(fig['ttft_p50_ms'])} / {ms(fig['ttft_p90_ms'])}"],
            ["inter-token p50 / p90", f"{ms(fig['itl_p50_ms'])} / {ms(fig['itl_p90_ms'])}"],
            ["output tokens/s", f"{fig['output_tokens_per_s']:,.1f} (all requests together)"],
            ["tokens per request", f"{fig['mean_prompt_tokens'] or '-'} in, {fig['mean_output_tokens'] or '-'} out "
                                   "(engine's count)"]]
    rows += [[f"  error x{n}", kind] for kind, n in fig["errors_by_kind"].items()]
    return rows


@click.command("bench")
@click.argument("model")
@click.option("--concurrency", "-c", type=click.IntRange(1, 4096), default=4, show_default=True,
              help="Requests in flight at once.")
@click.option("--requests", "-n", "count", type=click.IntRange(1, 10_000_000), default=None,
              help="Requests to send in all (default 8 per concurrent client, unless --duration).")
@click.option("--duration", type=click.FloatRange(0.1, 86400), default=None, metavar="SECONDS",
              help="Send requests for this long instead of a count.")
@click.option("--prompt-tokens", type=click.IntRange(1, 1_000_000), default=128, show_default=True,
              help="Prompt length in tokens (about: one word per token).")
@click.option("--max-tokens", type=click.IntRange(1, 1_000_000), default=64, show_default=True,
              help="Output tokens per request (end-of-sequence ignored, so every request makes them all).")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=300.0, show_default=True, metavar="SECONDS",
              help="Per request.")
@router_url_option
@key_file_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def bench(app: AppContext, model: str, concurrency: int, count: int | None, duration: float | None,
          prompt_tokens: int, max_tokens: int, timeout: float, router_url: str | None, key_file: Path | None,
          store_url: str | None, as_json: bool) -> None:
    """Load MODEL through the router: TTFT, inter-token latency, output tokens/s, errors; stored per
    model, profile, engine version and nodes (shown by `llmgw models MODEL`)."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from llmgw.probe import bench as probe
    from llmgw.probe import target
    from llmgw.state import read_state
    from llmgw.store import BenchRecord, open_store

    if count is not None and duration is not None:
        raise UsageError("--requests and --duration exclude each other", hint="give one of them")
    if count is None and duration is None:
        count = 8 * concurrency
    site = app.site
    served = target.served_by(read_state(site.state_file), model)
    url = target.router_url(site, router_url)
    key = target.api_key(key_file)
    store = open_store(resolve_store_url(app, store_url))  # before the load: a bad store fails at once
    click.get_current_context().call_on_close(store.close)
    spec = probe.BenchSpec(concurrency, count, duration, prompt_tokens, max_tokens, timeout)

    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(),
                    console=output.err_console, transient=True, disable=not output.err_console.is_terminal)
    with bars:
        what = f"bench {served.model} x{concurrency}"
        task = bars.add_task(what, total=count if count is not None else duration, errors=0)
        failed = 0

        def on_done(sample: probe.Sample, elapsed: float) -> None:
            nonlocal failed
            failed += 0 if sample.ok else 1
            if count is not None:
                bars.update(task, advance=1, errors=failed)
            else:
                bars.update(task, completed=min(elapsed, duration or elapsed), errors=failed)

        samples, wall, fingerprint = asyncio.run(probe.run_bench(url, key, served.model, spec, on_done))
    fig = probe.summarize(samples, wall)
    record = BenchRecord(
        id=secrets.token_hex(6), model=served.model, profiles=served.profiles, engine=served.engine,
        engine_version=target.engine_version(served.engine, fingerprint), nodes=served.nodes,
        created_at=datetime.now(UTC), concurrency=concurrency, requests=fig["requests"],
        errors=fig["errors"], prompt_tokens=prompt_tokens, max_tokens=max_tokens, duration_s=fig["duration_s"],
        output_tokens_per_s=fig["output_tokens_per_s"], ttft_p50_ms=fig["ttft_p50_ms"],
        ttft_p90_ms=fig["ttft_p90_ms"], itl_p50_ms=fig["itl_p50_ms"], itl_p90_ms=fig["itl_p90_ms"])
    store.add_bench(record)
    result = {**fig, "id": record.id, "model": served.model, "profiles": served.profiles, "engine": served.engine,
              "engine_version": record.engine_version, "nodes": served.nodes, "router": url,
              "concurrency": concurrency, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens,
              "created_at": record.created_at.isoformat(), "store": store.redacted_url}
    if as_json:
        output.print_json(result)
    else:
        output.console.print(output.table(
            ["", ""], figures_rows(fig),
            title=f"{served.model} on {served.profiles} ({served.engine} {record.engine_version}; {served.nodes}), "
                  f"{concurrency} at a time, {prompt_tokens} in / {max_tokens} out"))
        output.console.print(f"Stored as bench run {record.id} in {store.redacted_url}.", markup=False)
    if fig["ok"] == 0:
        first = next(iter(fig["errors_by_kind"]), "no request ran")
        raise LlmgwError(f"every request failed ({first})", hint="`llmgw replicas` and `llmgw logs REPLICA`")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [bench]
