"""What only the routers know: per replica health, in-flight requests, last use, errors.

The views take it as data in the shape of the admin API's `/api/v1/replicas`, so the
dashboard (inside the router: the live table) and the CLI (over HTTP from the control
host) hand the same thing in. With several routers, counts add up and the most recent
use wins; while one of them does not answer (`missing`), idle times are not known (a
replica may be busy through that router) and in-flight counts are the answering routers'
share. `Runtime.unknown(...)` says why there is none: a view then prints `?`, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llmgw.views import tunnel
from llmgw.views.tunnel import AdminRoute


@dataclass(frozen=True)
class Runtime:
    replicas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # id -> admin replica JSON
    routers: tuple[str, ...] = ()  # where it came from ("this router" inside the dashboard)
    problems: tuple[str, ...] = ()  # routers that did not answer, and why
    missing: tuple[str, ...] = ()  # the routers that did not answer (their share is not known)
    notes: tuple[str, ...] = ()  # what the routers say of their own routing (a weighted route's guard tripped)

    @property
    def known(self) -> bool:
        return bool(self.routers)

    @property
    def complete(self) -> bool:
        """Every router asked answered: only then is a replica nobody used here really idle."""
        return self.known and not self.missing

    @classmethod
    def unknown(cls, *problems: str) -> Runtime:
        return cls(problems=tuple(problems))

    @classmethod
    def from_replicas(cls, sources: Sequence[tuple[str, Iterable[Mapping[str, Any]]]],
                      problems: Iterable[str] = (), missing: Iterable[str] = (), notes: Iterable[str] = ()) -> Runtime:
        """Merge each router's replica list: (router name, replicas as the admin API gives them)."""
        merged: dict[str, dict[str, Any]] = {}
        for _name, replicas in sources:
            for r in replicas:
                rid = str(r.get("id"))
                have = merged.get(rid)
                if have is None:
                    merged[rid] = dict(r)
                    continue
                # Watched by all that route to it only as long as by the one that began last (llmgw.idle);
                # a router that does not list it cannot send it requests.
                watched = (have.get("watched_seconds"), r.get("watched_seconds"))
                have["watched_seconds"] = None if None in watched else min(watched)  # type: ignore[type-var]
                for key in ("in_flight", "requests"):
                    have[key] = int(have.get(key) or 0) + int(r.get(key) or 0)
                if r.get("last_used") is not None and (have.get("last_used") is None
                                                       or str(r["last_used"]) > str(have["last_used"])):
                    have["last_used"] = r["last_used"]
                    have["idle_seconds"] = r.get("idle_seconds")
                if r.get("health") == "unhealthy" or have.get("health") == "unknown":
                    have["health"] = r.get("health")
                if r.get("last_error") and not have.get("last_error"):
                    have["last_error"] = r["last_error"]
        return cls(replicas=merged, routers=tuple(name for name, _ in sources), problems=tuple(problems),
                   missing=tuple(missing), notes=tuple(dict.fromkeys(notes)))

    def replica(self, replica_id: str) -> Mapping[str, Any] | None:
        return self.replicas.get(replica_id)


Target = str | AdminRoute | tuple[str, str]
"""A router to ask: an admin API URL, a route through SSH (llmgw.views.tunnel), or (router, why it cannot be asked)."""


def fetch_runtime(targets: Sequence[Target], *, timeout: float = 5.0, tunnel_timeout: float = 15.0) -> Runtime:
    """Ask every router's admin API at once, each bounded in time: `tunnel_timeout` for an SSH
    tunnel to come up, `timeout` for the answer (20 s at most per router by default).

    A router that does not answer is a problem line and a name in `missing`, not an
    error: the views still show everything the site's files know, and what that router
    alone knows (its in-flight requests, its last use) shows as not known.
    """
    if not targets:
        return Runtime.unknown("no router to ask")
    with ThreadPoolExecutor(max_workers=min(len(targets), 32), thread_name_prefix="llmgw-router-ask") as pool:
        answers = list(pool.map(lambda t: _ask(t, timeout, tunnel_timeout), targets))
    sources = [(name, reps) for name, reps, _, _ in answers if reps is not None]
    problems = [why for _, reps, why, _ in answers if reps is None and why]
    return Runtime.from_replicas(sources, problems, missing=[name for name, reps, _, _ in answers if reps is None],
                                 notes=[n for *_, notes in answers for n in notes])


def _ask(target: Target, timeout: float,
         tunnel_timeout: float) -> tuple[str, list[Mapping[str, Any]] | None, str | None, list[str]]:
    why: str | None
    if isinstance(target, tuple):
        name, cannot = target
        return name, None, f"router {name} is not known: {cannot}", []
    if isinstance(target, str):
        url = target.rstrip("/")
        replicas, why, notes = _get(url, timeout)
        return url, replicas, None if why is None else f"router admin API at {url} did not answer ({why})", notes
    try:
        with tunnel.opened(target, timeout=tunnel_timeout) as base:
            replicas, why, notes = _get(base, timeout)
    except tunnel.TunnelError as exc:
        replicas, why, notes = None, str(exc), []
    how = "through SSH" if target.ssh is not None else f"at {target.direct_url}"
    return target.router, replicas, None if why is None else \
        f"router {target.router} is not known: its admin API did not answer {how} ({why})", notes


def _get(base: str, timeout: float) -> tuple[list[Mapping[str, Any]] | None, str | None, list[str]]:
    # httpx here, not at the top: every view imports Runtime, and `--no-router` (or a site
    # without routers) asks no router; importing httpx costs 0.08 s of CPU.
    import httpx

    try:
        resp = httpx.get(f"{base}/api/v1/replicas", timeout=timeout)
        resp.raise_for_status()
        body = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}", []
    replicas = body.get("replicas") if isinstance(body, dict) else None
    if not isinstance(replicas, list):
        return None, "it answered without a replica list", []
    notes = body.get("notes")  # a weighted route's guard tripped (router/routes.py): one line each, bounded
    notes = [n[:500] for n in notes[:20] if isinstance(n, str) and n.isprintable()] if isinstance(notes, list) else []
    return [r for r in replicas if isinstance(r, dict)], None, notes
