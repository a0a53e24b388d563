"""Running the router: one process, one event loop, several uvicorn listeners.

The client, admin and metrics listeners are separate uvicorn servers sharing one
loop and one `Router`, so they see the same table and counters without any IPC.
With several workers (workers.py) the same object runs in each worker (the client
listener alone, on the socket the supervisor bound) and in the supervisor (the admin
and metrics listeners alone, reading the workers' shared counters).
Signals are handled here once for all of them (uvicorn's own handling would only
stop the last server started). On stop, listeners close first, in-flight requests get
`graceful_timeout` seconds to finish, then the background loops stop and the last
usage counts are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn

from llmgw.errors import UsageError
from llmgw.router.admin import admin_app, metrics_app
from llmgw.router.app import Peers, Router, client_app
from llmgw.router.dashboard_child import DashboardChild, loopback_url
from llmgw.router.limits import LimitedHttp, guard
from llmgw.router.ondemand import Activator
from llmgw.router.settings import RouterSettings
from llmgw.router.shared import SharedTable
from llmgw.store import Store

log = logging.getLogger("llmgw.router")


def parse_addr(text: str, *, default_host: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT`, `PORT` or `[V6]:PORT`."""
    host, port_text = default_host, text
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
        host = host or default_host
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"cannot read the address {text!r}", hint="write HOST:PORT, e.g. 127.0.0.1:8001") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"port {port} in {text!r} is out of range")
    return host, port


def make_session(settings: RouterSettings) -> aiohttp.ClientSession:
    """The upstream client the benchmark chose: aiohttp, unlimited pool, no decompression.

    Connect timeout lives here; first-byte and chunk-gap timeouts are per request
    (proxy.py), since they differ by phase.
    """
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300,
                                     keepalive_timeout=settings.upstream_keepalive)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout),
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # RouterServer handles signals for every listener at once


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket on host:port (non-blocking), or a UsageError saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}",
                         hint="choose a free port, or stop what holds this one") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def bind_group(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one address (SO_REUSEPORT), one per worker: the kernel
    spreads new connections over them by their addresses' hash. One socket shared by
    every worker would not: each worker's loop wakes on the same connections, and the
    first awake accepts all that are waiting, so a burst of keep-alive connections (a
    load balancer's pool, a benchmark's) lands on one worker and stays there (seen: 32
    of 32). The address is first bound alone, without SO_REUSEPORT, so that a listener
    already there (another router of the same user with SO_REUSEPORT too) is an error,
    not a silent share of its connections; port 0 resolves to one port for the group."""
    probe = bind(host, port)
    port = int(probe.getsockname()[1])
    probe.close()
    group: list[socket.socket] = []
    try:
        for _ in range(count):
            group.append(bind(host, port, reuse_port=True))
    except BaseException:
        for sock in group:
            sock.close()
        raise
    return group


@dataclass
class RouterServer:
    state_path: Path
    store: Store
    listen: tuple[str, int] | None  # None: no client listener (a supervisor of workers)
    admin_listen: tuple[str, int] | None  # None: no admin listener (a worker)
    metrics_listen: tuple[str, int] | None = None
    settings: RouterSettings = field(default_factory=RouterSettings)
    activator: Activator | None = None
    # Called inside the loop to make the upstream session; tests hand in their own.
    session_factory: Callable[[], aiohttp.ClientSession] | None = None
    graceful_timeout: int = 30
    # The site the admin listener's dashboard shows, from a process of its own started on
    # the first page asked for (dashboard_child.py); None: no dashboard.
    site_dir: Path | None = None
    # A worker's client listener: the socket its supervisor bound (instead of `listen`).
    client_socket: socket.socket | None = None
    # Several workers: the shared counters (a worker writes its row; the supervisor reads),
    # whether this process stops idle on-demand replicas, and the supervisor's view of
    # its workers for the admin API (app.py Peers).
    shared: SharedTable | None = None
    reports_load: bool = True
    peers: Peers | None = None
    # Filled once listening: listener name -> (host, port) actually bound.
    addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    router: Router | None = None
    dashboard: DashboardChild | None = None  # made in run() when there is a site and an admin listener
    started: threading.Event = field(default_factory=threading.Event)
    _servers: list[uvicorn.Server] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop_requested: bool = False

    def _config(self, app: Any) -> uvicorn.Config:
        # LimitedHttp: uvicorn's httptools protocol with bounded headers, time and connections.
        return uvicorn.Config(guard(app), lifespan="off", access_log=False, log_config=None,
                              http=LimitedHttp.with_limits(self.settings), ws="none", proxy_headers=False,
                              server_header=False, date_header=False,
                              timeout_keep_alive=int(self.settings.keep_alive_timeout),
                              timeout_graceful_shutdown=self.graceful_timeout)

    async def run(self, *, install_signals: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        own_session = self.session_factory is None
        session = make_session(self.settings) if self.session_factory is None else self.session_factory()
        router = self.router = Router(state_path=self.state_path, store=self.store, session=session,
                                      settings=self.settings, activator=self.activator, shared=self.shared,
                                      reports_load=self.reports_load)
        router.peers = self.peers
        sockets: list[socket.socket] = []
        dashboard = None
        if self.admin_listen is not None and self.site_dir is not None:
            dashboard = self.dashboard = DashboardChild(self.site_dir, self.store.url,
                                                        logging.getLevelName(log.getEffectiveLevel()).lower())
        try:
            await router.start()
            plan: list[tuple[str, tuple[str, int] | socket.socket, Any]] = []
            client = self.client_socket if self.client_socket is not None else self.listen
            if client is not None:
                plan.append(("client", client, client_app(router)))
            if self.admin_listen is not None:
                plan.append(("admin", self.admin_listen, admin_app(router, self.site_dir, dashboard)))
            if self.metrics_listen is not None:
                plan.append(("metrics", self.metrics_listen, metrics_app(router, self.site_dir)))
            for name, where, app in plan:
                sock = where if isinstance(where, socket.socket) else bind(*where)
                sockets.append(sock)
                self.addresses[name] = sock.getsockname()[:2]
                self._servers.append(_Server(self._config(app)))
            if dashboard is not None:  # the dashboard asks the admin API back, on loopback
                dashboard.admin_url = loopback_url(*self.addresses["admin"])
            if self._stop_requested:
                self.stop()
            if install_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._loop.add_signal_handler(sig, self.stop)
            serving = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(self._servers, sockets,
                                                                                   strict=True)]
            while not all(s.started for s in self._servers):
                if any(t.done() for t in serving):
                    break
                await asyncio.sleep(0.01)
            for name, addr in self.addresses.items():
                log.info("%s listener on http://%s:%d", name, *addr)
            self.started.set()
            await asyncio.gather(*serving)
        finally:
            self.started.set()
            if dashboard is not None:
                await dashboard.close()
            await router.stop()
            if own_session:
                await session.close()
            for sock in sockets:
                sock.close()

    def stop(self) -> None:
        """Ask every listener to shut down; safe from any thread."""
        self._stop_requested = True

        def go() -> None:
            if self.router is not None:  # batches start nothing new while the listeners close
                self.router.batches.runner.stop_sending()
            for s in self._servers:
                s.should_exit = True
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(go)
        else:
            go()
