"""`llmgw models MODEL`: one model's row of `llmgw models`, with its stored bench and check results.

`models` is a click group (its subcommands `search` and `inspect` browse the Hub), so
`ModelsGroup` takes a first word that is no subcommand as the MODEL to show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from llmgw.cli import output
from llmgw.errors import UsageError

if TYPE_CHECKING:  # rich is imported where text is printed: `llmgw models --json` needs none of it
    from rich.console import Console

MODEL_ARG = "llmgw.models.model"


class ModelsGroup(click.Group):
    """A group whose first positional word, when it names no subcommand, is a model."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {o for p in self.params if isinstance(p, click.Option) and not p.is_flag
                       for o in p.opts}
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--":
                break
            if word.startswith("-"):
                i += 2 if word in takes_value else 1
                continue
            if word not in self.commands:
                ctx.meta[MODEL_ARG] = args.pop(i)
                # a second positional word would be taken for a subcommand: refuse it here
                if any(not a.startswith("-") for a in args[i:]):
                    raise click.UsageError(f"one MODEL at a time (got {word!r} and more)", ctx)
            break
        return super().parse_args(ctx, args)


def model_detail(view: dict[str, Any], name: str, store_url: str) -> dict[str, Any]:
    """The model's record from `models_view` (by name or alias) with its stored results."""
    from llmgw.store import sqlite_path
    from llmgw.views.results import model_results

    record = next((m for m in view["models"] if name == m["name"] or name in m.get("aliases", [])), None)
    if record is None:
        known = ", ".join(m["name"] for m in view["models"]) or "none"
        raise UsageError(f"no model {name!r} in the catalog", hint=f"models: {known}")
    path = sqlite_path(store_url)
    if path is not None and not path.exists():
        # A view reads: opening an SQLite store creates its file, so a store not made yet
        # (by `keys`, `bench` or `check`) holds no results, and is left unmade.
        results: dict[str, Any] = {"bench": [], "checks": [], "store": store_url, "store_exists": False}
    else:
        results = model_results(store_url, record["name"])
    return {"model": record, **results, "notes": view["notes"]}


def show_model(app: Any, view: dict[str, Any], name: str, as_json: bool) -> None:
    """Print one model of `view` (models_view) with its results, from the store `keys` uses."""
    import os

    from llmgw.cli.keys_cmd import resolve_store_url

    detail = model_detail(view, name, resolve_store_url(app, os.environ.get("LLMGW_STORE")))
    if as_json:
        output.print_json(detail)
    else:
        from rich.console import Console

        detail_text(detail, Console(highlight=False, soft_wrap=False))


def detail_text(detail: dict[str, Any], con: Console) -> None:
    from rich.text import Text

    from llmgw.views.results import BENCH_HEADERS, bench_rows, check_headers, check_rows

    m = detail["model"]
    con.print(output.table(["MODEL", "ALIASES", "SERVING", "REPLICAS", "STATUS"],
                           [[m["name"], ", ".join(m["aliases"]) or "-", m["serving"], m["replicas_text"],
                             m["status"]]]))
    if m.get("requires"):
        con.print(Text(f"Requires: {', '.join(m['requires'])} (checked by apply on each new replica)"))
    con.print()
    if detail.get("error"):
        con.print(Text(f"Results not readable from {detail['store']}: {detail['error']}", style="red"),
                  overflow="fold")
        return
    if detail["bench"]:
        con.print(output.table(BENCH_HEADERS, bench_rows(detail["bench"]), title="Benchmarks (newest first)"))
    else:
        con.print(Text(f"No benchmarks yet: `llmgw bench {m['name']}` runs one.", style="dim"))
    con.print()
    if detail["checks"]:
        con.print(output.table(check_headers(detail["checks"]), check_rows(detail["checks"]),
                               title="Capability checks (newest first)"))
        failing = [f"{c['capability']}: {c['detail']}" for c in detail["checks"][0]["checks"] if c["status"] != "pass"]
        for f in failing:
            con.print(Text(f"  {f}", style="dim"), overflow="fold")
    else:
        con.print(Text(f"No capability checks yet: `llmgw check {m['name']}` runs them.", style="dim"))
    if detail.get("store_exists") is False:
        con.print(Text(f"No results stored: {detail['store']} does not exist yet", style="dim"), overflow="fold")
    else:
        con.print(Text(f"Results from {detail['store']}", style="dim"), overflow="fold")
