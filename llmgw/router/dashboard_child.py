"""The dashboard in a process of its own, behind the admin listener.

The dashboard renders the site (catalog, inventory, facts, placement, fabrics) with the
views the bastion's CLI uses: at 4,096 hosts, hundreds of MB of objects and up to seconds
of CPU a page. None of it runs in the router. The admin listener hands every request its
own routes do not answer (pages, the stylesheet, the fabric JSON, apply's download
progress) to a child process, `python -m llmgw.web.process`, and relays the answer; the
child asks the admin API back, with GETs on loopback, for what only the router knows. So
the process that holds the keys and the client listener imports no view, template or
site loader (tests/maintenance/test_router_closure.py pins what it imports), and a page
of a large site costs the routing loop nothing.

- The child starts on the first dashboard request, not with the router: most routers are
  never asked for a page, and each child is a Python process of its own (~60 MB).
- The router binds the child's listening socket (a Unix socket in a directory only the
  router's user may enter) and keeps it, handing it over by file descriptor: requests
  wait in its backlog while the child starts or is replaced, never on a missing path.
- Its settings go on stdin (the store URL may carry a password: never a command line).
- A child that exits is started again by the next request; one that exits before it
  answered anything (a broken install, say) waits a backoff first (1 s doubling to 30 s),
  and meanwhile pages answer 503 saying so. It dies with the router (PR_SET_PDEATHSIG).
- The admin listener's guard (admin_guard.py) runs before any of this: the Host check
  for every request, and the token for apply's one POST.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from llmgw.router.openai_errors import error_payload

log = logging.getLogger("llmgw.router")

BACKOFF_MAX = 30.0
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL when the router stops
# A page of a 4,096-host site takes seconds; the first one also waits for the child to start.
ANSWER_TIMEOUT = 120.0
MAX_BODY = 8 * 2**20  # the one POST (apply's download progress) is at most 4 MiB (llmgw.web.dashboard)
# What of a request the dashboard reads, and of its answer the browser needs.
_REQUEST_HEADERS = ("accept", "content-type", "if-none-match", "if-modified-since")
_ANSWER_HEADERS = ("content-type", "cache-control", "etag", "last-modified", "location")


def loopback_url(host: str, port: int) -> str:
    """The admin listener as the child reaches it: a wildcard bind through loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class DashboardChild:
    """One router's dashboard process: started on demand, restarted, stopped with the router."""

    command: tuple[str, ...] = (sys.executable, "-m", "llmgw.web.process")

    def __init__(self, site_dir: Path, store_url: str | None, log_level: str = "info") -> None:
        self.site_dir = site_dir
        self.store_url = store_url
        self.log_level = log_level
        self.admin_url: str | None = None  # set once the admin listener is bound (server.py)
        self.proc: asyncio.subprocess.Process | None = None
        self._exited: asyncio.Task[int] | None = None  # done when the child exits
        self.starts = 0
        self.socket_dir: Path | None = None  # where the child's socket is (0700), once made
        self._sock: socket.socket | None = None
        self._session: aiohttp.ClientSession | None = None
        self._started = 0.0
        self._answered = False  # whether the child running now has answered a request
        self._backoff = 0.0
        self._retry_at = 0.0
        self._lock = asyncio.Lock()

    def _listen(self) -> Path:
        if self._sock is None:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="llmgw-dashboard-"))  # 0700: this user's alone
            path = self.socket_dir / "dashboard.sock"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path))
            sock.listen(128)
            self._sock = sock
        assert self.socket_dir is not None
        return self.socket_dir / "dashboard.sock"

    def _reap(self, now: float) -> None:
        """Forget a child that exited, and say so; set the backoff its life earned."""
        if self.proc is None or self.proc.returncode is None:
            return
        lived = now - self._started
        self._backoff = 0.0 if self._answered else min(BACKOFF_MAX, max(1.0, self._backoff * 2))
        self._retry_at = now + self._backoff
        log.warning("the dashboard process (pid %d) exited with %s after %.1f s%s", self.proc.pid,
                    self.proc.returncode, lived, f"; it is started again after {self._backoff:g} s"
                    if self._backoff else "")
        self.proc = None

    async def _ensure(self) -> str | None:
        """The child running; or why there is none now."""
        async with self._lock:
            now = time.monotonic()
            self._reap(now)
            if self.proc is not None:
                return None
            if self.admin_url is None:
                return "the router's admin listener is not bound yet"
            if now < self._retry_at:
                return (f"the dashboard process keeps exiting; it is started again in {self._retry_at - now:.0f} s "
                        f"(the router's log says why)")
            path = self._listen()
            assert self._sock is not None
            spec = {"parent": os.getpid(), "fd": self._sock.fileno(), "site_dir": str(self.site_dir),
                    "admin_url": self.admin_url, "store_url": self.store_url, "log_level": self.log_level}
            # With the router's environment, not llmgw.childenv's: the child runs as the router's
            # user (whose /proc/PID/environ it could read anyway) and may need PGPASSWORD for the store.
            try:
                proc = await asyncio.create_subprocess_exec(*self.command, stdin=subprocess.PIPE,
                                                            pass_fds=(self._sock.fileno(),))
            except OSError as exc:  # out of processes or memory: the next request tries again
                self._retry_at = now + max(1.0, self._backoff)
                return f"cannot start the dashboard process: {exc}"
            assert proc.stdin is not None
            # One that exited at once (its pipe closed: OSError, or RuntimeError from asyncio) says so by its exit.
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.write(json.dumps(spec).encode())  # far below a pipe's buffer: never blocks
                proc.stdin.close()
            self.proc, self._started, self._answered = proc, now, False
            self._exited = asyncio.create_task(proc.wait(), name="llmgw-dashboard-exit")
            self.starts += 1
            if self._session is None:
                self._session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path)),
                                                      timeout=aiohttp.ClientTimeout(total=ANSWER_TIMEOUT))
            log.info("dashboard process started (pid %d) for %s", proc.pid, self.site_dir)
            return None

    async def forward(self, request: Request) -> Response:
        """Relay one admin request to the dashboard process, and its answer back."""
        why = await self._ensure()
        if why is not None:
            return JSONResponse(error_payload(503, why), status_code=503)
        body = b""
        if request.method not in ("GET", "HEAD"):
            if int(request.headers.get("content-length") or 0) > MAX_BODY:
                return JSONResponse(error_payload(413, f"a request to the dashboard is at most {MAX_BODY} bytes"),
                                    status_code=413)
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY:
                    return JSONResponse(error_payload(413, f"a request to the dashboard is at most {MAX_BODY} "
                                                           "bytes"), status_code=413)
        raw = request.scope.get("raw_path") or request.url.path.encode()
        query = request.scope.get("query_string") or b""
        # As the client wrote it: aiohttp keeps a valid percent-escape as it is.
        url = "http://dashboard" + raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        headers = {k: v for k in _REQUEST_HEADERS if (v := request.headers.get(k)) is not None}
        exited = self._exited
        assert self._session is not None and exited is not None
        asking = asyncio.ensure_future(self._session.request(request.method, url, data=body or None,
                                                             headers=headers, allow_redirects=False))
        # A child that exits before answering (at its start, say) answers nothing: its requests
        # would wait in the socket's backlog for a successor until ANSWER_TIMEOUT.
        await asyncio.wait((asking, exited), return_when=asyncio.FIRST_COMPLETED)
        if not asking.done():
            asking.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await asking
            return JSONResponse(error_payload(503, f"the dashboard process exited (code {exited.result()}) "
                                                   "before it answered; the router's log says why"), status_code=503)
        try:
            upstream = asking.result()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return JSONResponse(error_payload(503, f"the dashboard process did not answer: {type(exc).__name__}"),
                                status_code=503)
        if exited is self._exited:
            self._answered = True
        answer = {k: v for k in _ANSWER_HEADERS if (v := upstream.headers.get(k)) is not None}

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.content.iter_chunked(2**16):
                    yield chunk
            finally:
                upstream.release()
        return StreamingResponse(relay(), status_code=upstream.status, headers=answer)

    async def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after STOP_GRACE) and remove its socket."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.socket_dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.socket_dir)
            self.socket_dir = None
