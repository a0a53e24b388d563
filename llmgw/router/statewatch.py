"""Following the state file: a cheap stat on a timer, a full read only when it changed.

apply replaces the file atomically (rename), so a change shows as a new inode, size or
mtime; the router never reads a half-written file. A file that fails to parse is
reported and ignored: the router keeps routing by the last good state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from llmgw.errors import StateError
from llmgw.state import State, read_state

log = logging.getLogger("llmgw.router")

Signature = tuple[int, int, int] | None


def _signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class StateWatcher:
    def __init__(self, path: Path, apply: Callable[[State], None], interval: float = 0.5) -> None:
        self.path = path
        self.apply = apply
        self.interval = interval
        self.signature: Signature = None
        self.error: str | None = None
        self._wake = asyncio.Event()

    def load_now(self) -> None:
        """First load, synchronously: a broken state file at start is an error, not a warning."""
        self.signature = _signature(self.path)
        self.apply(read_state(self.path))

    def poke(self) -> None:
        """Check at once instead of at the next tick (after an activation, say)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            await self.check()

    async def check(self) -> None:
        sig = _signature(self.path)
        if sig == self.signature:
            return
        if sig is None:
            if self.error is None:
                log.error("state file %s disappeared; still routing by the last state", self.path)
            self.error = f"state file {self.path} is missing"
            self.signature = None
            return
        try:
            state = await asyncio.to_thread(read_state, self.path)
        except StateError as exc:
            if self.error != exc.message:
                log.error("%s; still routing by serial of the last good state", exc.message)
            self.error = exc.message
            self.signature = sig
            return
        self.signature = sig
        self.error = None
        self.apply(state)
