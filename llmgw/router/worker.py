"""One worker of a multi-worker router: `python -m llmgw.router.worker`, started by workers.py.

It reads its orders as JSON on stdin (state file, store URL, settings, which row of the
shared counters is its own, the file descriptors of the listening socket, the counters
and its control socket), serves the client listener with a `RouterServer` of its own,
and answers the supervisor on the control socket: `p` (ready: it answers only once it
listens), `m` (its metrics counts, metrics.py `snapshot()`), `u` (write its usage to
the store now). Each command is one byte and a request id; each answer the request id,
a length and JSON. SIGTERM drains it (server.py); it dies with its supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any

from llmgw.router.app import Router
from llmgw.router.server import RouterServer
from llmgw.router.settings import RouterSettings
from llmgw.router.shared import SharedTable

REPLY = struct.Struct(">II")  # request id, JSON length


def _die_with(parent: int) -> None:
    """SIGTERM this process when the supervisor dies (Linux), then check it is still there."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        raise SystemExit("llmgw router worker: the supervisor is gone")


async def _answer(sock: socket.socket, router: Router, server: RouterServer) -> None:
    """Answer the supervisor's commands until it closes the control socket."""
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        while True:
            head = await reader.readexactly(5)
            command, seq = head[:1], struct.unpack(">I", head[1:])[0]
            if command == b"m":
                payload: Any = router.metrics.snapshot()
            elif command == b"u":
                await router.usage_sync.sync()
                payload = {}
            else:
                payload = {"pid": os.getpid()}
            body = json.dumps(payload).encode()
            writer.write(REPLY.pack(seq, len(body)) + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, OSError):
        server.stop()  # the supervisor is gone: so is the reason to serve
    finally:
        writer.close()


async def _serve(spec: dict[str, Any]) -> None:
    from llmgw.router.plugins import load_activator
    from llmgw.store import open_store

    state_path = Path(spec["state_path"])
    site_dir = Path(spec["site_dir"]) if spec["site_dir"] else None
    store = open_store(spec["store_url"])
    client = socket.socket(fileno=spec["client_fd"])
    control = socket.socket(fileno=spec["control_fd"])
    try:
        server = RouterServer(
            state_path=state_path, store=store, listen=None, admin_listen=None,
            settings=RouterSettings(**spec["settings"]), client_socket=client,
            activator=load_activator(spec["activator"], state_path, site_dir) if spec["activator"] else None,
            graceful_timeout=int(spec["graceful_timeout"]),
            shared=SharedTable(spec["shared_fd"], row=int(spec["index"])), reports_load=False)
        serving = asyncio.create_task(server.run(install_signals=True))
        while not server.started.is_set():
            await asyncio.sleep(0.01)
        answering = None
        if not serving.done() and server.router is not None:
            answering = asyncio.create_task(_answer(control, server.router, server))
        await serving
        if answering is not None:
            answering.cancel()
    finally:
        store.close()


def main() -> None:
    spec = json.loads(sys.stdin.read())
    _die_with(int(spec["parent"]))
    logging.basicConfig(level=str(spec["log_level"]).upper(),
                        format=f"%(asctime)s %(levelname)s %(name)s[worker {spec['index']}]: %(message)s")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        asyncio.run(_serve(spec))
    else:
        uvloop.run(_serve(spec))


if __name__ == "__main__":
    main()
