"""Stored bench and check results as `llmgw models MODEL`, `bench`, `check` and the dashboard show them.

One JSON shape for all of them (the CLI prints it, the dashboard renders it), and the
rows of the two tables people read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw.errors import LlmgwError
from llmgw.store import BenchRecord, CheckRecord, Store, open_store, redact_url


def bench_json(r: BenchRecord) -> dict[str, Any]:
    return {"id": r.id, "model": r.model, "profiles": r.profiles, "engine": r.engine,
            "engine_version": r.engine_version, "nodes": r.nodes, "created_at": r.created_at.isoformat(),
            "concurrency": r.concurrency, "requests": r.requests, "errors": r.errors,
            "prompt_tokens": r.prompt_tokens, "max_tokens": r.max_tokens, "duration_s": r.duration_s,
            "output_tokens_per_s": r.output_tokens_per_s, "ttft_p50_ms": r.ttft_p50_ms,
            "ttft_p90_ms": r.ttft_p90_ms, "itl_p50_ms": r.itl_p50_ms, "itl_p90_ms": r.itl_p90_ms}


def check_runs(records: Sequence[CheckRecord]) -> list[dict[str, Any]]:
    """Check records grouped by run, newest first, each with its checks in order.
    (Runs are stamped to the microsecond, so two in one second still sort.)"""
    runs: dict[str, dict[str, Any]] = {}
    for r in records:
        run = runs.setdefault(r.run_id, {
            "run_id": r.run_id, "model": r.model, "created_at": r.created_at.isoformat(), "profiles": r.profiles,
            "engine": r.engine, "engine_version": r.engine_version, "nodes": r.nodes, "replica": r.replica,
            "checks": []})
        run["checks"].append({"capability": r.capability, "status": r.status, "detail": r.detail})
    return sorted(runs.values(), key=lambda x: x["created_at"], reverse=True)


def model_results(store_url: str, model: str, *, bench_limit: int = 10, check_runs_limit: int = 5) -> dict[str, Any]:
    """{"bench": [...], "checks": [...]} from the store; a store that cannot be read is an
    `error` beside empty lists (a view still shows the rest of the model)."""
    try:
        store = open_store(store_url)
    except LlmgwError as exc:
        return {"bench": [], "checks": [], "store": redact_url(store_url), "error": exc.message}
    try:
        return results_of(store, model, bench_limit=bench_limit, check_runs_limit=check_runs_limit)
    finally:
        store.close()


def results_of(store: Store, model: str, *, bench_limit: int = 10, check_runs_limit: int = 5) -> dict[str, Any]:
    """As `model_results`, from a store already open (the router's, for its dashboard)."""
    try:
        bench = [bench_json(r) for r in store.bench_results(model, bench_limit)]
        checks = check_runs(store.check_results(model, check_runs_limit))
    except LlmgwError as exc:
        return {"bench": [], "checks": [], "store": store.redacted_url, "error": exc.message}
    return {"bench": bench, "checks": checks, "store": store.redacted_url}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


BENCH_HEADERS = ["WHEN (UTC)", "PROFILES", "ENGINE", "NODES", "CONC", "IN/OUT", "REQS", "ERR",
                 "TTFT p50/p90 ms", "ITL p50/p90 ms", "OUT TOK/S"]


def bench_rows(bench: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [[b["created_at"][:16].replace("T", " "), b["profiles"], f"{b['engine']} {b['engine_version']}",
             b["nodes"], str(b["concurrency"]), f"{b['prompt_tokens']}/{b['max_tokens']}", str(b["requests"]),
             str(b["errors"]), f"{_ms(b['ttft_p50_ms'])} / {_ms(b['ttft_p90_ms'])}",
             f"{_ms(b['itl_p50_ms'])} / {_ms(b['itl_p90_ms'])}", f"{b['output_tokens_per_s']:,.1f}"]
            for b in bench]


def check_headers(runs: Sequence[dict[str, Any]]) -> list[str]:
    caps: list[str] = []
    for run in runs:
        caps += [c["capability"] for c in run["checks"] if c["capability"] not in caps]
    return ["WHEN (UTC)", "PROFILES", "ENGINE", "ON", *[c.upper() for c in caps]]


def check_rows(runs: Sequence[dict[str, Any]]) -> list[list[str]]:
    caps = [h.lower() for h in check_headers(runs)[4:]]
    rows = []
    for run in runs:
        by = {c["capability"]: c["status"] for c in run["checks"]}
        rows.append([run["created_at"][:16].replace("T", " "), run["profiles"],
                     f"{run['engine']} {run['engine_version']}", run["replica"] or "router",
                     *[by.get(c, "-") for c in caps]])
    return rows
