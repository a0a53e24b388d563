"""How the CLI prints: tables for people, `--json` for pipelines, errors on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from llmgw.errors import LlmgwError
from llmgw.yamlio import json_text

console = Console(highlight=False, soft_wrap=False)
err_console = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """Stable JSON on stdout: sorted keys, so scripts and diffs see the same bytes each run
    (json.dumps's, written by pydantic-core where that is byte-identical: llmgw.yamlio)."""
    sys.stdout.write(json_text(data, default=str))


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None) -> Table:
    t = Table(title=title, box=None, header_style="bold", pad_edge=False, show_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


def print_error(exc: LlmgwError) -> None:
    err_console.print(f"[bold red]Error:[/] {exc.message}", markup=True, soft_wrap=True)
    for line in exc.detail:
        err_console.print(f"  {line}", markup=False, soft_wrap=True)
    if exc.hint:
        err_console.print(f"[dim]{exc.hint}[/]", soft_wrap=True)
