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
from llmgw.router.engine_keys import EngineKeys
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
    def __init__(self, path: Path, apply: Callable[[State], None], interval: float = 0.5,
                 engine_keys: EngineKeys | None = None) -> None:
        self.path = path
        self.apply = apply
        # Delivered beside the state (before it): checked on the same tick, read first.
        self.engine_keys = engine_keys
        self.interval = interval
        self.signature: Signature = None
        self.error: str | None = None
        self._wake = asyncio.Event()

    def load_now(self) -> None:
        """First load, synchronously: a broken state file at start is an error, not a warning."""
        if self.engine_keys is not None:
            self.engine_keys.refresh()
        self.signature = _signature(self.path)
        try:
            state = read_state(self.path)
        except StateError:
            raise
        except Exception as exc:  # e.g. bytes that are not UTF-8: an error, not a traceback
            raise StateError(f"cannot read the state file {self.path}: {type(exc).__name__}: {exc}",
                             hint="restore the file from the site (llmgw apply delivers it)") from None
        self.apply(state)

    def poke(self) -> None:
        """Check at once instead of at the next tick (after an activation, say)."""
        self._wake.set()

    async def run(self) -> None:
        """Check forever. Nothing a state file (or the disk) can do ends this loop: any
        failure is logged once, shown as `error` (on /api/v1/status), and the router keeps
        routing by the last good state."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive whatever went wrong
                self._report(f"cannot follow the state file {self.path}: {type(exc).__name__}: {exc}")

    def _report(self, message: str) -> None:
        if self.error != message:
            log.error("%s; still routing by the last good state", message)
        self.error = message

    async def check(self) -> None:
        if self.engine_keys is not None:
            self.engine_keys.refresh()
        try:
            sig = _signature(self.path)
        except OSError as exc:
            self._report(f"cannot stat the state file {self.path}: {exc.strerror or exc}")
            return
        if sig == self.signature:
            return
        if sig is None:
            self._report(f"state file {self.path} is missing")
            self.signature = None
            return
        try:
            state = await asyncio.to_thread(read_state, self.path)
        except StateError as exc:
            self._report(exc.message)
            self.signature = sig
            return
        except Exception as exc:  # a reader bug or an odd file must not stop the watcher
            self._report(f"cannot read the state file {self.path}: {type(exc).__name__}: {exc}")
            self.signature = sig
            return
        self.signature = sig
        self.apply(state)
        self.error = None
