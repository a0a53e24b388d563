"""Apply's weights downloads as a router's dashboard keeps them: the last list apply posted.

Apply's side (following the downloads, posting them through SSH tunnels) is
llmgw.views.live_downloads; this is the router's, which takes whatever reaches its admin
listener, so every posted row is checked field by field and the list is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

FORGET_AFTER_S = 60.0  # a list no apply refreshed for this long is gone (apply killed)
MAX_ENTRIES = 10_000  # what a router keeps from one post, whatever it is sent


class DownloadBoard:
    """The router's side: the last list apply posted, until it is done or goes quiet."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._at = 0.0
        self._body: dict[str, Any] = {"downloads": []}

    def post(self, body: Any) -> None:
        """Keep a posted list; raises ValueError for a body that is not one."""
        if not isinstance(body, dict) or not isinstance(body.get("downloads"), list):
            raise ValueError("expected {\"downloads\": [...]}")
        rows = []
        for d in body["downloads"][:MAX_ENTRIES]:
            row = _row(d)
            if row is None:
                raise ValueError(f"not a download: {str(d)[:200]}")
            rows.append(row)
        self._body = {"downloads": [] if body.get("done") else rows,
                      "updated_at": str(body.get("updated_at") or "")[:40]}
        self._at = self.clock()

    def current(self) -> dict[str, Any]:
        if self._body["downloads"] and self.clock() - self._at > FORGET_AFTER_S:
            self._body = {"downloads": []}
        return self._body

    def by_node(self) -> Mapping[tuple[str, str], Mapping[str, Any]]:
        """(node, cache name) -> reading: the `downloads` mapping llmgw.views.replicas takes."""
        return {(d["host"], d["name"]): d for d in self.current()["downloads"]}


def _row(d: Any) -> dict[str, Any] | None:
    """A posted download, checked field by field (whatever posts to the admin listener)."""
    if not isinstance(d, dict):
        return None
    host, name, done, total = d.get("host"), d.get("name"), d.get("bytes"), d.get("total")
    rate, eta, reps = d.get("rate"), d.get("eta_seconds"), d.get("replicas", [])
    if not (isinstance(host, str) and isinstance(name, str) and 0 < len(host) <= 255 and 0 < len(name) <= 255):
        return None
    if not isinstance(done, int) or done < 0 or not (total is None or (isinstance(total, int) and total > 0)):
        return None
    if not all(x is None or (isinstance(x, int | float) and x >= 0) for x in (rate, eta)):
        return None
    if not isinstance(reps, list) or not all(isinstance(r, str) and len(r) <= 255 for r in reps):
        return None
    return {"host": host, "name": name, "bytes": done, "total": total, "rate": rate, "eta_seconds": eta,
            "replicas": reps[:100]}
