"""Apply's weights downloads, live on the dashboard: bytes, rate and ETA per host and replica.

Apply follows every download (the weights_progress module, polled by Ansible) and hands
each reading to a `DownloadFeed` (llmgw.cli.apply_cmd). The feed works out rates and
ETAs, names the replicas each download is for (the plan's replicas with that cache entry
on that host), and every couple of seconds posts the list to each router's dashboard
(`POST /api/v1/downloads` on the admin listener, through the same SSH tunnels the views
use, kept open while apply runs), from a thread of its own: a slow or absent router
never slows apply. The router keeps the list in memory in a `DownloadBoard`
(llmgw.views.download_board: the router's side, which imports neither httpx nor the
tunnels), forgets it when apply says it is done or stops reporting, and the dashboard draws it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from llmgw.errors import LlmgwError
from llmgw.inventory import load_inventory
from llmgw.views import tunnel
from llmgw.views.tunnel import AdminRoute, routes_for

if TYPE_CHECKING:
    from llmgw.site import Site

POST_EVERY_S = 2.0
RATE_WINDOW_S = 20.0  # the rate is the bytes over (up to) the last this many seconds
MAX_BACKOFF_S = 30.0  # the longest wait before asking a router that did not answer again


@dataclass
class _Download:
    host: str
    name: str
    total: int | None = None
    replicas: list[str] = field(default_factory=list)
    samples: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, bytes)

    def add(self, when: float, done: int, total: int | None) -> None:
        if total:
            self.total = total
        self.samples.append((when, done))
        while len(self.samples) > 2 and self.samples[1][0] < when - RATE_WINDOW_S:
            self.samples.pop(0)

    def rate(self) -> float | None:
        """Bytes per second over the window; None until two readings apart in time."""
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        if t1 - t0 < 0.5:
            return None
        return max(0.0, (b1 - b0) / (t1 - t0))

    def to_json(self) -> dict[str, Any]:
        done = self.samples[-1][1]
        rate = self.rate()
        eta = None
        if self.total and rate:
            eta = max(0.0, (self.total - done) / rate)
        return {"host": self.host, "name": self.name, "bytes": done, "total": self.total,
                "rate": None if rate is None else round(rate, 1),
                "eta_seconds": None if eta is None else round(eta, 1), "replicas": list(self.replicas)}


class DownloadFeed:
    """Readings from apply in, the dashboard's list out to every router, every POST_EVERY_S."""

    def __init__(self, routes: Callable[[], Sequence[AdminRoute | tuple[str, str]]],
                 replicas_for: Callable[[str, str], list[str]], *, say: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, every: float = POST_EVERY_S,
                 token: Callable[[], str] | None = None) -> None:
        self.routes = routes  # worked out in the feed's thread, at the first download (it reads the inventory)
        # The routers' admin token (llmgw.apply.admin_token): a post is a change there
        # (llmgw.router.admin_guard). Asked for once, in the feed's thread, if a router is reachable.
        self.token = token
        self.replicas_for = replicas_for  # (host, cache name) -> replica ids being fetched for
        self.say = say
        self.clock = clock
        self.every = every
        self._lock = threading.Lock()
        self._downloads: dict[tuple[str, str], _Download] = {}
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed: set[str] = set()
        self.posts = 0  # lists posted (tests and the report count them)
        self.failures = 0  # posts that did not reach a router

    def reading(self, host: str, name: str, done: int, total: int | None) -> None:
        """One poll's reading of one download (apply's weights_progress results)."""
        with self._lock:
            d = self._downloads.get((host, name))
            if d is None:
                d = self._downloads[(host, name)] = _Download(host, name, replicas=self.replicas_for(host, name))
            d.add(self.clock(), done, total)
        self._changed.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="llmgw-download-feed", daemon=True)
            self._thread.start()

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d.to_json() for _, d in sorted(self._downloads.items())
                    if d.total is None or d.samples[-1][1] < d.total]

    def close(self) -> None:
        """Stop posting and tell every router the downloads are over (apply moved on or ended)."""
        if self._thread is None:
            return
        self._stop.set()
        self._changed.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            routes = list(self.routes())
        except LlmgwError as exc:
            self._note("any", exc.message)
            return
        for r in routes:
            if isinstance(r, tuple):
                self._note(r[0], r[1])
        reachable = [r for r in routes if isinstance(r, AdminRoute)]
        if not reachable:
            return
        try:
            headers = {"Authorization": f"Bearer {self.token()}"} if self.token is not None else {}
        except LlmgwError as exc:
            self._note("any", exc.message)
            return
        tunnels: dict[str, tuple[contextlib.ExitStack, str]] = {}  # router -> its open tunnel, base URL
        retry_at: dict[str, tuple[float, float]] = {}  # router -> (when to try again, the wait after that)
        try:
            while True:
                self._changed.wait(timeout=self.every)
                done = self._stop.is_set()
                self._changed.clear()
                body = {"updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
                        "downloads": [] if done else self.snapshot(), "done": done}
                for route in reachable:
                    name = route.router
                    when, wait = retry_at.get(name, (0.0, self.every))
                    if time.monotonic() < when and not done:
                        continue  # it failed lately (on a first apply no router runs yet): back off
                    try:
                        if name not in tunnels:
                            stack = contextlib.ExitStack()
                            try:
                                tunnels[name] = (stack, stack.enter_context(tunnel.opened(route)))
                            except BaseException:
                                stack.close()
                                raise
                        httpx.post(f"{tunnels[name][1]}/api/v1/downloads", json=body, headers=headers,
                                   timeout=5).raise_for_status()
                        self.posts += 1
                        retry_at.pop(name, None)
                    except (tunnel.TunnelError, httpx.HTTPError) as exc:
                        self.failures += 1
                        if name in tunnels:  # one tunnel per router at most: closed, opened afresh later
                            tunnels.pop(name)[0].close()
                        retry_at[name] = (time.monotonic() + wait, min(wait * 2, MAX_BACKOFF_S))
                        self._note(name, str(exc) if isinstance(exc, tunnel.TunnelError)
                                   else f"its admin API did not answer: {type(exc).__name__}: {exc}")
                if done:
                    return
                self._stop.wait(timeout=self.every)  # at most one post per period; close() cuts it short
        finally:
            for stack, _ in tunnels.values():
                stack.close()

    def _note(self, router: str, why: str) -> None:
        if router not in self._failed and self.say is not None:
            self.say(f"router {router}'s dashboard does not show download progress ({why}; a router that "
                     "is not installed yet, on a first apply, cannot); apply goes on")
        self._failed.add(router)


def download_feed(site: Site, wanted: Mapping[tuple[str, str], Sequence[str]], *,
                  say: Callable[[str], None] | None = None, token: Callable[[], str] | None = None) -> DownloadFeed:
    """The feed for one apply: to the site's routers (none on a recorded site), posting with
    the routers' admin `token`; `wanted` is (host, cache entry) -> the replicas the plan
    downloads it for (llmgw.views.planned.planned_downloads: this module is the routers'
    too, and the router never imports the planner)."""

    def routes() -> list[AdminRoute | tuple[str, str]]:
        if site.config.recorded or not site.inventory.exists():
            return []
        routers = load_inventory(site.inventory).routers
        return routes_for([routers[n] for n in sorted(routers)], site.known_hosts)

    return DownloadFeed(routes, lambda host, name: sorted(wanted.get((host, name), [])), say=say, token=token)
