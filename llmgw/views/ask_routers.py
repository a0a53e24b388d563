"""Asking the routers for their `Runtime`, from the bastion: every router's admin API at once,
directly or through an SSH tunnel (llmgw.views.tunnel), each bounded in time.

The CLI's views (`llmgw status`, `replicas`, ...) ask here; a router's dashboard builds its
own Runtime from the router it runs in, so the router process imports neither this module
nor the tunnels and the bastion's known_hosts handling (#34).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llmgw.views import tunnel
from llmgw.views.runtime import Runtime
from llmgw.views.tunnel import AdminRoute

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
