"""Waiting for an event in a test: poll a condition with a deadline, never a bare sleep."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any


async def turns(pred: Callable[[], Any], what: str) -> None:
    """In a test's event loop: yield until `pred()`, a bounded number of short turns (the code
    under test may wait on store calls in threads), never a sleep standing in for the event."""
    for _ in range(2000):
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def wait_until(pred: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll until pred() is truthy and return its value (a bounded wait for a real process, not a speed check)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM a process that still runs and reap it; killed if it has not ended within `grace` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
