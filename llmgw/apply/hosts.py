"""What apply asks of the hosts, each one a playbook run through llmgw.runner.

Every call names exactly the hosts it needs (`llmgw_apply_targets`), so apply touches
only hosts with changes, and reports progress through a `Progress` callback:
`(step, host, done, total)`, where done/total are bytes for downloads and tasks
otherwise (total None when not known).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw import ansible_content
from llmgw.apply.admin_token import admin_token
from llmgw.apply.controller_token import router_token
from llmgw.apply.dashboard_site import DashboardSite
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.apply.wheelhouse import engine_wheelhouse, hub_wheelhouse
from llmgw.engines import python_engines, python_requirement
from llmgw.errors import RunnerError
from llmgw.inventory import Inventory
from llmgw.runner import RunEvent, RunResult, run_playbook
from llmgw.state import read_state
from llmgw.weights.hub import is_repo_source
from llmgw.weights.shared import fetch_once

Progress = Callable[[str, str, int, "int | None"], None]
"""(step, host, done, total) as a step runs; for downloads done/total are bytes."""

FOLLOW_TASK = "Follow the downloads"
WAIT_TASK = "Ask the router for its replicas"
KEY_TASK = "Create the key"
# A file apply appends `<step>\t<task>\t<epoch seconds>` to as each Ansible task starts, when
# this names one: the hook tests use to act inside a step (kill apply mid-way) instead of
# guessing with sleeps, and bench/apply_lab.py --runs uses to say where apply's seconds go.
TRACE_ENV = "LLMGW_APPLY_TRACE"


@dataclass(frozen=True)
class RouterView:
    """What one router reported when apply last asked it."""

    host: str
    reached: bool  # the wait condition held before the timeout
    serial: int | None
    in_flight: dict[str, int]


def _pattern(hosts: Sequence[str]) -> str:
    return ",".join(sorted(hosts))


class Hosts:
    """Runs apply's playbooks against a site's inventory."""

    def __init__(self, inventory_path: Path, inventory: Inventory, *, artifacts: Path | None,
                 forks: int = 20, extra: Mapping[str, Any] | None = None,
                 engines_playbook: str = "apply.yml", dashboard: Mapping[str, str] | None = None,
                 dashboard_site: DashboardSite | None = None,
                 shared_cache: Callable[[str], str | None] | None = None,
                 engine_keys: EngineKeyring | None = None) -> None:
        self.inventory_path = inventory_path
        # One API key per replica (llmgw.apply.engine_keys): engines answer only the router.
        self.engine_keys = engine_keys
        self.engines_playbook = engines_playbook
        # llmgw_router_* vars for the routers' dashboard, and the site's parts it shows (packed
        # into one archive per delivery that reconverges the routers)
        self.dashboard = dict(dashboard or {})
        self.dashboard_site = dashboard_site
        self.inventory = inventory
        self.artifacts = artifacts
        self.forks = forks
        self.extra = dict(extra or {})
        # host -> its shared cache's key (llmgw.weights.shared): one fetch per shared cache
        self.shared_cache = shared_cache

    @property
    def routers(self) -> list[str]:
        return sorted(self.inventory.routers)

    def _run(self, playbook: str, step: str, targets: Sequence[str] | None, extravars: dict[str, Any],
             progress: Progress | None, capture: Sequence[str] = ()) -> RunResult:
        done: dict[str, int] = {}
        trace = os.environ.get(TRACE_ENV)

        def on_event(event: RunEvent) -> None:
            if trace and event.kind == "task_start":
                with open(trace, "a", encoding="utf-8") as fh:
                    fh.write(f"{step}\t{event.task}\t{time.time():.3f}\n")
            if progress is None or event.host is None:
                return
            if event.task == FOLLOW_TASK and event.kind in ("other", "host_ok"):
                info = event.result  # the weights_progress module's result: state, bytes, total
                got = info.get("bytes")
                if isinstance(got, int):
                    total = info.get("total")
                    progress("weights", event.host, got, total if isinstance(total, int) else None)
                    # A progress that also follows downloads by cache entry (apply's feed to the
                    # routers' dashboards, llmgw.views.live_downloads) gets the entry's name.
                    named = getattr(progress, "download", None)
                    if callable(named) and isinstance(info.get("name"), str):
                        named(event.host, info["name"], got, total if isinstance(total, int) else None)
            elif event.kind in ("host_ok", "host_skipped"):
                done[event.host] = done.get(event.host, 0) + 1
                progress(step, event.host, done[event.host], None)

        vars_ = {**self.extra, **extravars}
        if targets is not None:
            vars_["llmgw_apply_targets"] = _pattern(targets)
        if trace:  # each run's bounds too (lines of their own, "#"-marked): Ansible's start-up is a cost
            with open(trace, "a", encoding="utf-8") as fh:
                fh.write(f"#run\t{step}\t{playbook}\t{time.time():.3f}\n")
        result = run_playbook(ansible_content.playbook(playbook), self.inventory_path, extravars=vars_,
                              forks=self.forks, on_event=on_event, capture=capture)
        if trace:
            with open(trace, "a", encoding="utf-8") as fh:
                fh.write(f"#end\t{step}\t{playbook}\t{time.time():.3f}\n")
        if not result.ok:
            detail = [f"{h}: {why}" for h, why in sorted(result.host_errors.items())] or result.output_tail[-8:]
            raise RunnerError(f"{step} failed on {', '.join(sorted(result.host_errors)) or 'the hosts'}",
                              detail=detail, hint="fix the cause, then run `llmgw plan` and `llmgw apply` again: "
                                                  "the state records how far this apply got")
        return result

    def engines(self, weights: Mapping[str, list[dict[str, str]]], shards: Mapping[str, list[dict[str, Any]]],
                step: str, progress: Progress | None) -> None:
        """Fetch `weights` and then start or stop `shards` (host -> entries), in one Ansible run."""
        if not weights and not shards:
            return
        self._run(self.engines_playbook, step, list(shards), self._engine_vars(weights, shards), progress)

    def _engine_vars(self, weights: Mapping[str, list[dict[str, str]]],
                     shards: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """The extra vars of apply.yml's plays for `weights` and `shards`."""
        artifacts = str(self.artifacts) if self.artifacts is not None else ""
        if self.shared_cache is not None:
            weights = fetch_once(weights, self.shared_cache)
        fetchers = _pattern(list(weights)) or "all:!all"  # a play needs a pattern; this one matches none
        # Whole Hugging Face repositories: hosts install huggingface_hub from an archive built here.
        hub = {"llmgw_weights_wheelhouse": str(hub_wheelhouse())} \
            if any(is_repo_source(e["source"].partition("?")[0]) for es in weights.values() for e in es) \
            else {}
        # vLLM and SGLang: hosts install them offline from archives of wheels built here, except
        # hosts that take built venvs from folders of their own (llmgw_engine_venv_dirs).
        reqs = sorted({python_requirement(str(e["engine"]), bool(e.get("gpus")))
                       for host, es in shards.items() if not self._has_venv_dirs(host)
                       for e in es if e.get("state", "present") == "present" and e.get("engine") in python_engines()})
        engines = {"llmgw_engine_python_archives": {r: str(engine_wheelhouse(r)) for r in reqs}} if reqs else {}
        return {"llmgw_apply_weights": dict(weights), "llmgw_apply_weight_targets": fetchers,
                "llmgw_apply_shards": dict(shards), "llmgw_apply_artifacts": artifacts, **hub, **engines,
                "llmgw_apply_engine_keys": self._shard_keys(shards)}

    def _has_venv_dirs(self, host: str) -> bool:
        known = self.inventory.hosts.get(host)
        return known is not None and bool(known.vars.get("llmgw_engine_venv_dirs"))

    def _shard_keys(self, shards: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, str]]:
        """host -> unit -> API key, for the shards that serve HTTP (rank 0) there."""
        if self.engine_keys is None:
            return {}
        return {host: {str(e["unit"]): self.engine_keys.key(str(e["replica"])) for e in entries
                       if e.get("state", "present") == "present" and int(e.get("rank", 0)) == 0}
                for host, entries in shards.items()}

    def deliver(self, state_file: Path, wheelhouse: Path, *, serial: int, present: Sequence[str] = (),
                idle: Sequence[str] = (), timeout: float = 60.0, state_only: bool = False,
                progress: Progress | None = None) -> list[RouterView]:
        """Give every router the state file, then ask each until it holds `serial`, knows
        `present` and has nothing in flight on `idle` (or `timeout` seconds pass).

        `state_only` skips installing and checking the service (done once per apply)."""
        if not self.routers:
            return []
        with tempfile.TemporaryDirectory(prefix="llmgw-dashboard-") as tmp:
            result = self._run("router.yml", "routers", None,
                               self._router_vars(Path(tmp), state_file, wheelhouse, serial=serial, present=present,
                                                 idle=idle, timeout=timeout, state_only=state_only),
                               progress, capture=[WAIT_TASK])
        return self._views(result, serial, present, idle)

    def drain(self, state_file: Path, wheelhouse: Path, *, serial: int, idle: Sequence[str], timeout: float,
              stop: Mapping[str, list[dict[str, Any]]], state_only: bool = False,
              progress: Progress | None = None) -> list[RouterView]:
        """`deliver(idle=...)`, then stop `stop`'s shards (host -> absent entries) in the same
        Ansible run (playbooks/drain.yml), on hosts only once every router has loaded `serial`.

        One run instead of two: each costs Ansible's start-up, the inventory and the role's
        argument checks, 2-3 s of a rolling move on 2 cores (#33)."""
        if not self.routers or not stop:
            views = self.deliver(state_file, wheelhouse, serial=serial, idle=idle, timeout=timeout,
                                 state_only=state_only, progress=progress)
            self.engines({}, stop, "stop", progress)
            return views
        with tempfile.TemporaryDirectory(prefix="llmgw-dashboard-") as tmp:
            result = self._run("drain.yml", "drain", list(stop),
                               {**self._router_vars(Path(tmp), state_file, wheelhouse, serial=serial, present=(),
                                                    idle=idle, timeout=timeout, state_only=state_only),
                                **self._engine_vars({}, stop)},
                               progress, capture=[WAIT_TASK])
        return self._views(result, serial, (), idle)

    def _router_vars(self, tmp: Path, state_file: Path, wheelhouse: Path, *, serial: int, present: Sequence[str],
                     idle: Sequence[str], timeout: float, state_only: bool) -> dict[str, Any]:
        """The extra vars of router.yml's plays (the dashboard's archive packed into `tmp`)."""
        site: dict[str, str] = {}
        if not state_only:
            site = dict(self.dashboard)
            if self.dashboard_site is not None:
                site["llmgw_router_site_bundle"] = str(self.dashboard_site.pack(tmp / "site.tar"))
        return {"llmgw_router_state_src": str(state_file.resolve()),
                "llmgw_router_wheelhouse": str(wheelhouse), "llmgw_router_state_only": state_only,
                **site, "llmgw_wait_serial": serial,
                "llmgw_router_engine_keys": self._router_keys(state_file),
                # What each router shows the controller's demand API, its own
                # (apply/controller_token.py); the role picks its host's.
                "llmgw_router_controller_tokens": (
                    {r: router_token(self.engine_keys, r) for r in self.routers}
                    if self.engine_keys is not None else {}),
                # What the routers' admin APIs take for a change (apply/admin_token.py).
                "llmgw_router_admin_token": (admin_token(self.engine_keys)
                                             if self.engine_keys is not None else ""),
                "llmgw_wait_present": list(present),
                "llmgw_wait_idle": list(idle), "llmgw_wait_timeout": max(1, int(timeout))}

    def _views(self, result: RunResult, serial: int, present: Sequence[str], idle: Sequence[str]) -> list[RouterView]:
        """What each router answered the wait for the state (None where it did not)."""
        views = []
        for host in self.routers:
            res = result.results.get(host, {}).get(WAIT_TASK)
            body = res.result.get("json") if res is not None else None
            if not isinstance(body, dict):
                views.append(RouterView(host, False, None, {}))
                continue
            reps = [r for r in body.get("replicas", []) if isinstance(r, dict)]
            in_flight = {str(r.get("id")): int(r.get("in_flight") or 0) for r in reps}
            got = int(body.get("serial") or 0)
            reached = got >= serial and set(present) <= set(in_flight) and all(in_flight.get(i, 0) == 0 for i in idle)
            views.append(RouterView(host, reached, got, in_flight))
        return views

    def _router_keys(self, state_file: Path) -> dict[str, str]:
        """replica id -> API key, for every replica of the state the routers are sent."""
        if self.engine_keys is None:
            return {}
        return {r.id: self.engine_keys.key(r.id) for r in read_state(state_file).replicas}

    def create_key(self, name: str, group: str | None = None) -> dict[str, Any]:
        """An API key in the routers' store, made by the router host's own `llmgw keys create`."""
        if not self.routers:
            raise RunnerError("the inventory has no llmgw_routers host to create a key on")
        result = self._run("router_key.yml", "keys", None, {"llmgw_key_name": name, "llmgw_key_group": group or ""},
                           None, capture=[KEY_TASK])
        for host in self.routers:
            res = result.results.get(host, {}).get(KEY_TASK)
            if res is not None and res.status == "ok":
                data = json.loads(str(res.result.get("stdout") or "{}"))
                if isinstance(data, dict):
                    return data
        raise RunnerError("the router host did not return a key")
