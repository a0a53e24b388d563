"""The batches' backlog: requests of the batches a router runs that it has not sent yet.

The router sends a batch `batch_concurrency` requests at a time (batch_runner.py), so its
admission queue never shows the thousands of lines still waiting in the store. Demand
scaling needs them (ondemand.py reports them per model; controller/demand.py counts them as
load), so the runner notes each running batch's not-sent count here, at most once a second
per batch (a store query), and forgets a batch once it ends or another router holds it.
"""

from __future__ import annotations

from llmgw.store.batches import BatchRecord

_EVERY = 1.0  # seconds between counts of one batch


class Backlog:
    """batch id -> (the model its lines name, requests not sent yet). A batch names one
    model for every line, so the batch record's model is its lines'."""

    def __init__(self) -> None:
        self._by_batch: dict[str, tuple[str | None, int]] = {}
        self._counted: dict[str, float] = {}  # batch id -> monotonic time of its last count

    def due(self, batch_id: str, now: float) -> bool:
        """Is it time to count this batch again? (Marks it counted when it is.)"""
        last = self._counted.get(batch_id)
        if last is not None and now - last < _EVERY:
            return False
        self._counted[batch_id] = now
        return True

    def note(self, batch: BatchRecord, not_sent: int) -> None:
        self._by_batch[batch.id] = (batch.model, not_sent)

    def forget(self, batch_id: str) -> None:
        self._by_batch.pop(batch_id, None)
        self._counted.pop(batch_id, None)

    def by_model(self) -> dict[str, int]:
        """Model name (as the batches name it: an alias too) -> requests not sent yet."""
        out: dict[str, int] = {}
        for model, n in self._by_batch.values():
            if model is not None and n > 0:
                out[model] = out.get(model, 0) + n
        return out
