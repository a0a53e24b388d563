"""LoRA adapters (docs/adapters.md): what each engine must be asked for a request to an
adapter, or to a base that has adapters loaded.

The routing table (table.py) gives each adapter an entry whose replicas are the base's
replicas that loaded it, so an adapter's requests never reach a replica without it; this
module says how the request body changes on its way to one replica:

- vLLM and SGLang serve each adapter under its own name: `model` is the adapter's name.
- llama.cpp serves one model name and selects adapters per request: `model` is the base's
  name and `lora` lists every adapter the replica loaded, the requested one at its scale
  and the others at 0. A request for the base lists them all at 0, since llama-server
  applies a loaded adapter to any request that does not say otherwise.

A client's own `lora` field never reaches llama.cpp: which adapter serves a request is the
model name's to say, and the ids are the replica's, not the client's.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.router.table import ModelEntry, ReplicaRuntime

# Engines that select adapters per request by id rather than serve them under their own names
# (their descriptor's `adapters` is "static": loaded at start, chosen per request).
_BY_ID = frozenset({"llamacpp"})


@dataclass(frozen=True)
class EngineAsk:
    """What one engine is asked: the model name, and llama.cpp's `lora` (None: leave the
    field as the client sent it; an empty tuple: remove it)."""

    model: str
    lora: tuple[tuple[int, float], ...] | None = None

    def lora_json(self) -> list[dict[str, float | int]] | None:
        return None if self.lora is None else [{"id": i, "scale": s} for i, s in self.lora]


def engine_ask(target: ModelEntry, replica: ReplicaRuntime) -> EngineAsk:
    """How `replica` is asked for `target` (a model, or an adapter of the replica's model)."""
    record = replica.record
    if record.engine not in _BY_ID:
        return EngineAsk(target.name)  # an adapter's own served name, or the model's
    loaded = record.adapter_names
    if target.adapter is None:  # the base itself: every loaded adapter off
        return EngineAsk(target.name, tuple((i, 0.0) for i in range(len(loaded))))
    wanted = loaded.index(target.name)  # the table gives an adapter only replicas that list it
    scale = target.adapter.scale_percent / 100
    return EngineAsk(record.model, tuple((i, scale if i == wanted else 0.0) for i in range(len(loaded))))
