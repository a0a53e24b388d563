"""`parse_ibnetdiscover`: text in, fabrics out, or a `FabricError` naming the line.

Which of the two formats a text is in (the default topology file, or `-p` ports) is
told from its first line, so callers never have to say.
"""

from __future__ import annotations

from llmgw.errors import FabricError
from llmgw.fabric.build import build_fabrics
from llmgw.fabric.graph import Graph
from llmgw.fabric.ports_text import looks_like_ports, parse_ports
from llmgw.fabric.structure import Fabric
from llmgw.fabric.topology_text import looks_like_topology, parse_topology


def parse_graph(text: str, *, source: str = "<input>") -> Graph:
    first = next(((n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
                  if line.strip()), None)
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
    return build_fabrics(parse_graph(text, source=source))
