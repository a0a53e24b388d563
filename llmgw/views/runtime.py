"""What only the routers know: per replica health, in-flight requests, last use, errors.

The views take it as data in the shape of the admin API's `/api/v1/replicas`, so the
dashboard (inside the router: the live table) and the CLI (over HTTP from the control
host) hand the same thing in. With several routers, counts add up and the most recent
use wins. `Runtime.unknown(...)` says why there is none: a view then prints `?`, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Runtime:
    replicas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # id -> admin replica JSON
    routers: tuple[str, ...] = ()  # where it came from ("this router" inside the dashboard)
    problems: tuple[str, ...] = ()  # routers that did not answer, and why

    @property
    def known(self) -> bool:
        return bool(self.routers)

    @classmethod
    def unknown(cls, *problems: str) -> Runtime:
        return cls(problems=tuple(problems))

    @classmethod
    def from_replicas(cls, sources: Sequence[tuple[str, Iterable[Mapping[str, Any]]]],
                      problems: Iterable[str] = ()) -> Runtime:
        """Merge each router's replica list: (router name, replicas as the admin API gives them)."""
        merged: dict[str, dict[str, Any]] = {}
        for _name, replicas in sources:
            for r in replicas:
                rid = str(r.get("id"))
                have = merged.get(rid)
                if have is None:
                    merged[rid] = dict(r)
                    continue
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
        return cls(replicas=merged, routers=tuple(name for name, _ in sources), problems=tuple(problems))

    def replica(self, replica_id: str) -> Mapping[str, Any] | None:
        return self.replicas.get(replica_id)


def fetch_runtime(urls: Sequence[str], *, timeout: float = 2.0) -> Runtime:
    """Ask each router's admin listener (`http://127.0.0.1:8001` when it runs on this host).

    A router that does not answer is a problem line, not an error: the views still show
    everything the site's files know.
    """
    sources: list[tuple[str, list[Mapping[str, Any]]]] = []
    problems: list[str] = []
    for url in urls:
        base = url.rstrip("/")
        try:
            resp = httpx.get(f"{base}/api/v1/replicas", timeout=timeout)
            resp.raise_for_status()
            body = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(f"router admin API at {base} did not answer ({type(exc).__name__}: {exc})")
            continue
        replicas = body.get("replicas") if isinstance(body, dict) else None
        if not isinstance(replicas, list):
            problems.append(f"router admin API at {base} answered without a replica list")
            continue
        sources.append((base, [r for r in replicas if isinstance(r, dict)]))
    return Runtime.from_replicas(sources, problems)
