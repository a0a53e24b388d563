"""The router: the OpenAI gateway in front of the replicas recorded in the state file.

Its modules, by concern (tests/maintenance/test_codebase.py checks the map lists them all):

Serving the client listener
    app.py         Router (table, keys, usage, health, on demand) and the client listener
    proxy.py       the hot path: forward, retry before the first byte, stream back
    calls.py       what differs per endpoint: body (JSON, multipart, none), engine path, pin
    bodies.py      reading request bodies, bounded (JSON whole; a multipart form's front)
    endpoints.py   which endpoints the router forwards, and which engine serves which
    responses.py   which replica produced each Responses API id (bounded, in memory)
    streaming.py   usage out of SSE streams (and removing the usage event we asked for)
    limits.py      what one client may hold: bounded headers, body, time and connections
    openai_errors.py  every refusal in the OpenAI error shape
    landing.py     the page at /
    asgi.py        the ASGI types of the raw hot path

Replicas: routing and health
    table.py       routing table from the state, per-replica runtime, least-outstanding pick
    balance.py     which replica of a model takes a request: the model's routing policy
    routes.py      weighted routes: which target a request goes to, and the canary guard
    adapters.py    LoRA adapters: what each engine must be asked for a request to an adapter
    lora.py        adapters loaded at run time: load on first use, affinity, LRU eviction
    health.py      active health checks; passive marking lives on the replica runtime
    statewatch.py  following the state file
    engine_keys.py per-replica engine API keys: what the router shows an engine
    engine_metrics.py  the engines' own metrics, relayed

Admission: queues, priorities, fair share
    admission.py   per model: requests beyond the replicas' slots wait here, not on the engines
    scheduler.py   who goes next: priorities, then fair share, then arrival
    slots.py       how many requests each replica's engine serves at once, asked of the engine
    tokenize.py    exact prompt counts from the engines' tokenizers, for quotas near their limit
    admission_metrics.py  the queue's Prometheus metrics: names, labels, queue length

Keys, quotas and usage
    auth.py        API keys from an in-memory cache; the exact auth-exempt paths
    principal.py   who is calling and the group limits above them (auth makes, quotas charges)
    quotas.py      group limits (requests per minute, tokens per day)
    usage.py       usage counters, written to the store in batches

The Batch API
    batches.py     the OpenAI Files and Batch APIs on the client listener
    batch_files.py the files' bytes on disk, and the checks an upload passes
    batch_runner.py  running batches: each request sent once, recorded once
    batch_dispatch.py  how a batch request enters the proxy, at batch priority
    batch_backlog.py the requests of running batches not sent yet (reported as demand)

Scale to zero
    ondemand.py    holding requests while the controller starts a replica; load reports to it
    activator.py   the controller's demand API client (the Activator `--activator` loads)
    plugins.py     loading an Activator named MODULE:FACTORY

Admin and metrics
    admin.py       the admin listener (JSON API, dashboard) and the metrics listener
    dashboard_child.py  the dashboard's own process, which the admin listener relays pages to
    admin_guard.py who may use the admin listener: its own Host, and a token for any change
    metrics.py     Prometheus
    fleet_gauges.py  fleet gauges on /metrics, from apply's site copy

Processes
    server.py      uvicorn listeners in one process
    workers.py     N worker processes on one address (a socket each); the supervisor answers the admin API
    worker.py      one worker process (python -m llmgw.router.worker)
    shared.py      the workers' shared counters: in flight, requests, last use, serials
    settings.py    the router's tunables, with the defaults `llmgw router serve` uses
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmgw.router.admin import admin_app, metrics_app
    from llmgw.router.app import Router, client_app
    from llmgw.router.ondemand import Activator
    from llmgw.router.server import RouterServer, make_session
    from llmgw.router.settings import RouterSettings

# Exported lazily: importing llmgw.router.settings (as every CLI start does) must not load
# FastAPI, uvicorn and aiohttp.
_EXPORTS = {"Router": "app", "admin_app": "admin", "client_app": "app", "metrics_app": "admin",
            "Activator": "ondemand", "RouterServer": "server", "make_session": "server",
            "RouterSettings": "settings"}

__all__ = ["Activator", "Router", "RouterServer", "RouterSettings", "admin_app", "client_app", "make_session",
           "metrics_app"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'llmgw.router' has no attribute {name!r}")
    return getattr(importlib.import_module(f"llmgw.router.{module}"), name)
