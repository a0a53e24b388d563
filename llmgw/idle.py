"""When a replica is idle: the one definition `llmgw status` and the controller's scaler share.

A replica is idle for a window only once the routers have watched it for that whole window
and seen no request on it. A router's count starts when it first sees the replica (it
started, the replica was new to it, or the router restarted), so ten seconds after a
router restart nothing has been idle for an hour: it is *not known yet*, never idle. The
original control plane's rule: one restart must never nominate every replica for eviction.
A replica's own age bounds it too (it cannot have been idle for longer than it exists).
"""

from __future__ import annotations

from typing import Literal

IdleVerdict = Literal["idle", "not idle", "not known yet"]


def quiet_seconds(since_use: float | None, watched: float | None, age: float | None) -> float | None:
    """How long the replica is known to have gone without a request: since its last use (None:
    none seen), at most as long as the routers have watched it and as it has existed. None when
    no router watches it: nothing is known."""
    if watched is None:
        return None
    return min(v for v in (since_use, watched, age) if v is not None)


def idle_verdict(since_use: float | None, watched: float | None, age: float | None, window: float) -> IdleVerdict:
    """Idle for `window` seconds, not idle (used within it, or younger than it), or not known yet
    (no request seen, but no router has watched it for the whole window)."""
    quiet = quiet_seconds(since_use, watched, age)
    if quiet is not None and quiet >= window:
        return "idle"
    if (since_use is not None and since_use < window) or (age is not None and age < window):
        return "not idle"
    return "not known yet"
