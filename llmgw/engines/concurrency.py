"""How many requests a replica's engine runs at once, from the command line apply rendered.

The router's admission holds requests beyond a replica's slots (router/admission.py); llama.cpp
says its slots itself (`total_slots` in /props, router/slots.py), vLLM and SGLang do not. Their
number is fixed when the engine starts, by its arguments or, where the catalog sets none, by
the pinned version's default, declared beside each engine's command line (vllm.py, sglang.py
`max_running`). Apply works it out once for each new replica and records it in the state
(`Replica.max_running`), which the routers read.

The declarations belong in the engines' descriptors (descriptor.py) as a field; that module is
being changed beside this one, so the table below names them until it takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmgw.engines import sglang, vllm
from llmgw.engines.args import Device

# engine -> its declaration: (catalog args, GPUs per node, nodes, device or None) -> requests at once.
_DECLARED: dict[str, Callable[[Sequence[str], int, int, Device | None], int | None]] = {
    "vllm": vllm.max_running,
    "sglang": sglang.max_running,
}

MOST = 65536  # the state's bound, as for a profile's max_in_flight


def max_running(engine: str, args: Sequence[str], *, gpus: int, nodes: int,
                device: Device | None = None) -> int | None:
    """Requests a replica of `engine` started with the catalog's `args` runs at once (its
    shards: `nodes` of `gpus` GPUs each; `device`: its GPUs as facts know them); None when the
    engine says it itself (llama.cpp) or its default is not known before it starts."""
    declared = _DECLARED.get(engine)
    n = declared(args, gpus, nodes, device) if declared is not None else None
    return min(n, MOST) if n is not None else None
