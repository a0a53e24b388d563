"""Run inside an engine's own virtualenv (not by pytest): which option of the engine's real
parser each word names.

    python owned_in_venv.py vllm|sglang < words.json > answer.json

stdin: a JSON list of words (`--trust-rem`, `--api_key=x`, `-tp`). stdout: {"options":
{option string: dest} of the whole parser, "dests": [per word, the dest the parser reads
it as, or null where it reads none (unknown, ambiguous, a positional)]}. A word goes
through the parser's own preprocessing first (vLLM's FlexibleArgumentParser rewrites
`--a_b`, `--a.key` and `-O3` before argparse sees them), then argparse's own matching
(`_parse_optional`: exact, `=`, prefixes, short options with attached values).
Only the standard library and the engine are imported here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any


class _Seen(Exception):
    def __init__(self, args: list[str]) -> None:
        self.args_seen = args


def vllm_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


def sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


def preprocessed(parser: argparse.ArgumentParser, word: str) -> list[str]:
    """The words argparse itself gets for `word` (after the engine's own rewriting)."""
    def seen(args: Any = None, namespace: Any = None) -> Any:
        raise _Seen(list(args or []))

    parser.parse_known_args = seen  # type: ignore[method-assign]
    try:
        parser.parse_args([word])
    except _Seen as s:
        return s.args_seen
    return [word]


def dest_of(parser: argparse.ArgumentParser, word: str) -> str | None:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            words = preprocessed(parser, word)
            if not words or not words[0].startswith("-"):
                return None
            found = parser._parse_optional(words[0])
    except (SystemExit, Exception):  # ambiguous (argparse's error) or refused by the preprocessing
        return None
    if isinstance(found, list):  # Python 3.12+: every match
        found = found[0] if len(found) == 1 else None
    if not found or found[0] is None:
        return None
    return str(found[0].dest)


def main() -> None:
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # whatever the engine prints stays off the answer
        parser = {"vllm": vllm_parser, "sglang": sglang_parser}[sys.argv[1]]()
        options = {o: a.dest for o, a in parser._option_string_actions.items()}
        dests = [dest_of(parser, w) for w in json.load(sys.stdin)]
    json.dump({"options": options, "dests": dests}, out)


if __name__ == "__main__":
    main()
