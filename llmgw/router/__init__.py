"""The router: the OpenAI gateway in front of the replicas recorded in the state file.

    app.py         Router (table, keys, usage, health, on demand) and the client listener
    admin.py       the admin listener (JSON API, dashboard) and the metrics listener
    admin_guard.py who may use the admin listener: its own Host, and a token for any change
    proxy.py       the hot path: forward, retry before the first byte, stream back
    calls.py       what differs per endpoint: body (JSON, multipart, none), engine path, pin
    bodies.py      reading request bodies, bounded (JSON whole; a multipart form's front)
    endpoints.py   which endpoints the router forwards, and which engine serves which
    responses.py   which replica produced each Responses API id (bounded, in memory)
    streaming.py   usage out of SSE streams (and removing the usage event we asked for)
    table.py       routing table from the state, per-replica runtime, least-outstanding pick
    balance.py     which replica of a model takes a request: the model's routing policy
    health.py      active health checks; passive marking lives on the replica runtime
    statewatch.py  following the state file
    auth.py        API keys from an in-memory cache; the exact auth-exempt paths
    principal.py   who is calling and the group limits above them (auth makes, quotas charges)
    engine_keys.py per-replica engine API keys: what the router shows an engine
    quotas.py      group limits (requests per minute, tokens per day)
    usage.py       usage counters, written to the store in batches
    metrics.py     Prometheus
    engine_metrics.py  the engines' own metrics, relayed
    ondemand.py    holding requests while the controller starts a replica; load reports to it
    activator.py   the controller's demand API client (the Activator `--activator` loads)
    landing.py     the page at /
    asgi.py        the ASGI types of the raw hot path
    openai_errors.py  every refusal in the OpenAI error shape
    server.py      uvicorn listeners in one process
    limits.py      what one client may hold: bounded headers, body, time and connections
    settings.py    the router's tunables, with the defaults `llmgw router serve` uses
    workers.py     N worker processes on one address (a socket each); the supervisor answers the admin API
    worker.py      one worker process (python -m llmgw.router.worker)
    shared.py      the workers' shared counters: in flight, requests, last use, serials
    plugins.py     loading an Activator named MODULE:FACTORY
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
