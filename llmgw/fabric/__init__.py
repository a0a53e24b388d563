"""InfiniBand fabrics, mapped from `ibnetdiscover` output on the control side.

One host per fabric runs `ibnetdiscover`; its text travels in that host's facts and is
parsed here, so reading a new output format is an upgrade of the control host only.

    fabrics = parse_ibnetdiscover(text, source="gpu-node-01")   # list[Fabric]
    index = fabrics_from_facts(facts)                            # FabricIndex
    index.fabrics_of("gpu-node-01"); index.share_leaf(["gpu-node-01", "gpu-node-02"], fid)
"""

from llmgw.fabric.index import FabricIndex, fabrics_from_facts
from llmgw.fabric.parse import parse_ibnetdiscover
from llmgw.fabric.rates import Rate
from llmgw.fabric.structure import (
    Adapter,
    End,
    Endpoint,
    Fabric,
    Link,
    LinkKind,
    Rails,
    Switch,
    Tier,
)

__all__ = [
    "Adapter",
    "End",
    "Endpoint",
    "Fabric",
    "FabricIndex",
    "Link",
    "LinkKind",
    "Rails",
    "Rate",
    "Switch",
    "Tier",
    "fabrics_from_facts",
    "parse_ibnetdiscover",
]
