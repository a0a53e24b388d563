"""Helpers every test area may import: `from tests.support.cli import run_cli`."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from click.testing import CliRunner

from llmgw.cli import main


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> Result:
    """Run `llmgw ARGS` in-process through the console entry point (same error handling)."""
    runner = CliRunner()
    with runner.isolation() as streams:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = streams[0].getvalue(), streams[1].getvalue()
    return Result(code, out.decode(), err.decode())
