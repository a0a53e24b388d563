"""The parser's shortcuts for large captures read the same as the plain way."""

from __future__ import annotations

import gc
import itertools

import pytest

from llmgw.errors import FabricError
from llmgw.fabric import parse_ibnetdiscover
from llmgw.fabric.parse import first_line


def _plain(text: str) -> tuple[int, str] | None:
    return next(((n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
                 if line.strip()), None)


def test_first_line_is_what_splitlines_finds() -> None:
    """Every string of up to four pieces of blanks, line breaks of every kind and text."""
    pieces = [" ", "\t", "\n", "\r", "\r\n", "\v", "\x1c", "\x1f", "\x85", "\u2028", "\xa0",
              "x", "# a b "]
    checked = 0
    for size in range(5):
        for parts in itertools.product(pieces, repeat=size):
            text = "".join(parts)
            assert first_line(text) == _plain(text), repr(text)
            checked += 1
    assert checked > 30_000


@pytest.mark.parametrize("text", ["vendid=0x2c9\n", "Ca\t1 \"H-1\"\t\t# \"h mlx5_0\"\n"])
def test_collector_runs_again_after_a_parse_that_fails(text: str) -> None:
    assert gc.isenabled()
    with pytest.raises(FabricError):
        parse_ibnetdiscover(text, source="cap.txt")
    assert gc.isenabled()
