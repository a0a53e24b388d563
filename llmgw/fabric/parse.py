"""`parse_ibnetdiscover`: text in, fabrics out, or a `FabricError` naming the line.

Which of the two formats a text is in (the default topology file, or `-p` ports) is
told from its first line, so callers never have to say.
"""

from __future__ import annotations

import re

from llmgw import collector
from llmgw.errors import FabricError
from llmgw.fabric.build import build_fabrics
from llmgw.fabric.graph import Graph
from llmgw.fabric.ports_text import looks_like_ports, parse_ports
from llmgw.fabric.structure import Fabric
from llmgw.fabric.topology_text import looks_like_topology, parse_topology

# What str.splitlines() breaks lines on, and what str.strip() strips (re's \s is
# str.isspace()): the first line is found without splitting the whole text.
_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_NONSPACE = re.compile(r"\S")


def first_line(text: str) -> tuple[int, str] | None:
    """(line number, stripped text) of the first non-blank line, as enumerating
    `text.splitlines()` would find it, without splitting a 10 MB capture (a tenth of
    the parse) to look at its head."""
    m = _NONSPACE.search(text)
    if m is None:
        return None
    start = m.start()
    end = _BREAK.search(text, start)
    before = text[:start].splitlines(keepends=True)  # blank lines, and the line's indent
    n = len(before) + 1
    if before and _BREAK.search(before[-1]) is None:
        n -= 1  # the last piece is this line's own indentation
    return n, text[start:end.start() if end else len(text)].strip()


def parse_graph(text: str, *, source: str = "<input>") -> Graph:
    first = first_line(text)
    if first is None:
        raise FabricError(f"{source} is empty: expected ibnetdiscover output", source=source,
                          line=0, hint="run `ibnetdiscover` on a host of the fabric and "
                          "pass its whole output")
    n, line = first
    if looks_like_ports(line):
        return parse_ports(text, source)
    if looks_like_topology(line):
        return parse_topology(text, source)
    shown = line if len(line) <= 100 else line[:97] + "..."
    raise FabricError(
        f"{source}, line {n}: cannot read {shown!r}: expected ibnetdiscover output, "
        "starting with its `# Topology file` header (or a `vendid=` line), or "
        "`ibnetdiscover -p` output (lines such as `CA 5 1 0x... 4x HDR - SW ...`)",
        source=source, line=n)


def parse_ibnetdiscover(text: str, *, source: str = "<input>") -> list[Fabric]:
    """Every fabric in `text`, sorted by id.

    One capture holds one fabric (ibnetdiscover only sees the subnet it runs in); a text
    holding several pasted-together captures of different subnets gives one each.
    """
    # Some 400,000 small objects and no cycle: see llmgw.collector (40% of the parse).
    with collector.paused():
        return build_fabrics(parse_graph(text, source=source))
