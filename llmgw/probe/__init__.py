"""Probing models through the router: `llmgw bench` (load, latency, throughput) and
`llmgw check` (capabilities), with their results kept in the store
(shown by llmgw.views.results: the router's dashboard reads them, and never imports this package).

    target.py   the router's URL, the API key, what serves a model (from the state)
    bench.py    concurrent streamed requests and their statistics (TTFT, inter-token latency)
    checks.py   capability checks: chat, stream, completion, embeddings, tools, json
    verify.py   apply's hook: a new replica's required capabilities, checked on its engine
    sse.py      reading an OpenAI-style server-sent event stream, one line at a time

Front door: import from `llmgw.probe`. Names load on first use (PEP 562), so the CLI's
`--help` does not import httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmgw.probe.bench import BenchSpec, Sample, run_bench, summarize
    from llmgw.probe.checks import CheckResult, run_checks
    from llmgw.probe.target import Served, api_key, router_url, served_by
    from llmgw.probe.verify import replica_verifier

__all__ = ["BenchSpec", "CheckResult", "Sample", "Served", "api_key", "replica_verifier",
           "router_url", "run_bench", "run_checks", "served_by", "summarize"]

_LAZY = {"BenchSpec": "bench", "Sample": "bench", "run_bench": "bench", "summarize": "bench",
         "CheckResult": "checks", "run_checks": "checks",
         "Served": "target", "api_key": "target", "router_url": "target", "served_by": "target",
         "replica_verifier": "verify"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmgw.probe' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"llmgw.probe.{module}"), name)
    globals()[name] = value
    return value
