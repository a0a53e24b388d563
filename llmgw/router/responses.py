"""Which replica produced each Responses API response id, so continuations go back to it.

An engine that keeps responses (vLLM, SGLang with `store`) keeps them in its own memory:
a request with `previous_response_id`, and GET/DELETE/cancel of a response, only make
sense on the replica that answered it. The router remembers response id -> replica for
the most recent `capacity` responses (least recently used forgotten first), in memory:
a restarted router, or another router, does not know the id and says so.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_CAPACITY = 100_000  # ~100 bytes each: about 10 MB at most


@dataclass(frozen=True)
class Produced:
    replica: str  # replica id
    model: str  # the model that replica serves (the name after aliases and fallbacks)


class ResponseAffinity:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, Produced] = OrderedDict()

    def remember(self, response_id: str, replica: str, model: str) -> None:
        self._ids[response_id] = Produced(replica, model)
        self._ids.move_to_end(response_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def get(self, response_id: str) -> Produced | None:
        found = self._ids.get(response_id)
        if found is not None:
            self._ids.move_to_end(response_id)
        return found

    def forget(self, response_id: str) -> None:
        self._ids.pop(response_id, None)

    def __len__(self) -> int:
        return len(self._ids)
