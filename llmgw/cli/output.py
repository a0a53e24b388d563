"""How the CLI prints: tables for people, `--json` for pipelines, errors on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmgw.errors import LlmgwError
from llmgw.yamlio import json_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    console: Console
    err_console: Console


def __getattr__(name: str) -> Any:
    # `output.console` and `output.err_console` (and rich, ~35 ms of imports) are made when
    # first printed to: a `--json` command never loads rich.
    if name in ("console", "err_console"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _console(name: str) -> Console:
    made: Console | None = globals().get(name)
    if made is None:
        from rich.console import Console

        made = globals()[name] = Console(highlight=False, soft_wrap=False) if name == "console" else \
            Console(stderr=True, highlight=False)
    return made


def print_json(data: Any) -> None:
    """Stable JSON on stdout: sorted keys, so scripts and diffs see the same bytes each run
    (json.dumps's, written by pydantic-core where that is byte-identical: llmgw.yamlio)."""
    sys.stdout.write(json_text(data, default=str))


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None) -> Table:
    from rich.table import Table

    t = Table(title=title, box=None, header_style="bold", pad_edge=False, show_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


def print_error(exc: LlmgwError) -> None:
    err_console = _console("err_console")
    err_console.print(f"[bold red]Error:[/] {exc.message}", markup=True, soft_wrap=True)
    for line in exc.detail:
        err_console.print(f"  {line}", markup=False, soft_wrap=True)
    if exc.hint:
        err_console.print(f"[dim]{exc.hint}[/]", soft_wrap=True)
