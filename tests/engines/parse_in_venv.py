"""Run inside an engine's own virtualenv (not by pytest): parse command lines with the
engine's real argument parser.

    python parse_in_venv.py vllm|sglang < lines.json > verdicts.json

stdin: a JSON list of argument lists (the words after the module); stdout: a JSON list,
per line, of null (accepted) or the parser's complaint. Only the standard library and
the engine are imported here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable
from typing import Any


def vllm_parser() -> Callable[[list[str]], Any]:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())

    def parse(words: list[str]) -> Any:
        args = parser.parse_args(words)
        validate_parsed_serve_args(args)
        return args

    return parse


def sglang_parser() -> Callable[[list[str]], Any]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args


def main() -> None:
    parse = {"vllm": vllm_parser, "sglang": sglang_parser}[sys.argv[1]]()
    verdicts: list[str | None] = []
    for words in json.load(sys.stdin):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parse(words)
            verdicts.append(None)
        except SystemExit as e:
            verdicts.append(f"exit {e.code}: {(err.getvalue().strip().splitlines() or [''])[-1]}")
        except Exception as e:  # a validation error is as good a refusal as a parse error
            verdicts.append(f"{type(e).__name__}: {e}")
    json.dump(verdicts, sys.stdout)


if __name__ == "__main__":
    main()
