"""What only the routers know: per replica health, in-flight requests, last use, errors.

The views take it as data in the shape of the admin API's `/api/v1/replicas`, so the
dashboard (inside the router: the live table) and the CLI (over HTTP from the control
host) hand the same thing in. With several routers, counts add up and the most recent
use wins; while one of them does not answer (`missing`), idle times are not known (a
replica may be busy through that router) and in-flight counts are the answering routers'
share. `Runtime.unknown(...)` says why there is none: a view then prints `?`, never 0.

`routes` is each weighted route as the routers split it now (the admin API's route report,
router/routes.py `RouteRuntime.report()`: per target its share in force and whether the
guard tripped it, why, and `tripped_at` when the router says since when). None: not every
router that answered reported its routes, so no view may say a guard holds.

How the CLI asks the routers for it (over SSH tunnels, from the bastion) is
llmgw.views.ask_routers: the router builds its own, and imports no tunnel (#34).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Runtime:
    replicas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # id -> admin replica JSON
    routers: tuple[str, ...] = ()  # where it came from ("this router" inside the dashboard)
    problems: tuple[str, ...] = ()  # routers that did not answer, and why
    missing: tuple[str, ...] = ()  # the routers that did not answer (their share is not known)
    notes: tuple[str, ...] = ()  # what the routers say of their own routing (a weighted route's guard tripped)
    routes: Mapping[str, Mapping[str, Any]] | None = None  # route name -> report, merged (None: not reported)

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
                      problems: Iterable[str] = (), missing: Iterable[str] = (), notes: Iterable[str] = (),
                      routes: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> Runtime:
        """Merge each router's replica list: (router name, replicas as the admin API gives them);
        `routes`: router name -> its route reports (route name -> report), merged by merge_routes."""
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
                   missing=tuple(missing), notes=tuple(dict.fromkeys(notes)),
                   routes=merge_routes([name for name, _ in sources], routes))

    def with_routes(self, reports: Mapping[str, Mapping[str, Any]]) -> Runtime:
        """This runtime (one router's: the dashboard's "this router") with that router's route reports."""
        return replace(self, routes=merge_routes(self.routers, dict.fromkeys(self.routers, reports)))

    def replica(self, replica_id: str) -> Mapping[str, Any] | None:
        return self.replicas.get(replica_id)


def merge_routes(names: Sequence[str],
                 by_router: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> dict[str, dict[str, Any]] | None:
    """The routes as all of `names` route them: a target is tripped where any router tripped it
    (that router sends it nothing), with the first reason and the earliest `tripped_at`; its
    share is the routers' common one, None where they differ. None unless every router reported."""
    if not names or by_router is None or any(n not in by_router for n in names):
        return None
    merged: dict[str, dict[str, Any]] = {}
    for n in names:
        for route, report in by_router[n].items():
            have = merged.setdefault(route, {"stable": report.get("stable"), "targets": {}, "routers": 0})
            have["routers"] += 1
            for t in report.get("targets") or ():
                model = str(t.get("model"))
                seen = have["targets"].get(model)
                if seen is None:
                    have["targets"][model] = {"model": model, "share": t.get("share"),
                                              "tripped": bool(t.get("tripped")), "reason": t.get("reason"),
                                              "tripped_at": t.get("tripped_at")}
                    continue
                if seen["share"] != t.get("share"):
                    seen["share"] = None
                if t.get("tripped"):
                    seen["tripped"] = True
                    seen["reason"] = seen["reason"] or t.get("reason")
                    at = t.get("tripped_at")
                    if at is not None and (seen["tripped_at"] is None or str(at) < str(seen["tripped_at"])):
                        seen["tripped_at"] = at
    # A route some router does not route yet (its state is older): its split is not known.
    return {route: {"stable": r["stable"], "targets": list(r["targets"].values())}
            for route, r in merged.items() if r["routers"] == len(names)}
