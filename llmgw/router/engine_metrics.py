"""The engines' own metrics (llama-server `--metrics`, vLLM and SGLang `/metrics`), relayed.

Engines answer only with their replica's API key (engine_keys.py), and so does
llama-server's /metrics; a Prometheus scraping them directly would have to hold every
replica's key. Instead the router, which holds the keys already, fetches each
replica's /metrics when its own `/metrics/engines` is scraped, and serves them as one
page with `model` and `replica` labels added (taken from the state, so bounded). The
keys never leave the router host, and Prometheus needs no secret to scrape it.

Each engine gets a deadline and a size limit; one that does not answer in time, answers
an error or too much shows as `llmgw_engine_up{...} 0` and adds nothing else. Requests
go only to the replica's own endpoint, never following a redirect. An engine's own
`model`/`replica` labels (vLLM has `model_name`, which stays) are kept as
`engine_model`/`engine_replica`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from llmgw.router.engine_keys import EngineKeys
from llmgw.router.table import ReplicaRuntime, RoutingTable

MAX_BYTES = 4 * 2**20  # one engine's page; llama-server's is ~3 KB, vLLM's ~100 KB
TIMEOUT = 3.0
CONCURRENCY = 32  # engines asked at once


class _Page(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


async def _fetch(session: aiohttp.ClientSession, keys: EngineKeys, rep: ReplicaRuntime,
                 timeout: float, max_bytes: int) -> str:
    headers = keys.authorize(rep.id, {"Accept": "text/plain", "Accept-Encoding": "identity"})
    async with session.get(rep.endpoint + "/metrics", headers=headers, allow_redirects=False,
                           timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        if resp.status != 200:
            raise ValueError(f"answered {resp.status}")
        body = await resp.content.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise ValueError(f"page over {max_bytes} bytes")
        return body.decode("utf-8", "replace")


def _relabel(families: dict[str, Metric], text: str, rep: ReplicaRuntime) -> None:
    ours = {"model": rep.model, "replica": rep.id}
    parsed = list(text_string_to_metric_families(text))  # a page that does not parse adds nothing
    for fam in parsed:
        out = families.get(fam.name)
        if out is None:
            out = families[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
        elif out.type != fam.type:
            continue  # two engines disagree on a name's type: keep the first one's
        for s in fam.samples:
            labels = {(f"engine_{k}" if k in ours else k): v for k, v in s.labels.items()}
            out.samples.append(Sample(s.name, {**labels, **ours}, s.value, s.timestamp, s.exemplar))


async def relay(session: aiohttp.ClientSession, table: RoutingTable, keys: EngineKeys, *,
                timeout: float = TIMEOUT, max_bytes: int = MAX_BYTES) -> bytes:
    """The /metrics of every replica in `table` (any state: a starting one may already
    answer), relabelled, plus `llmgw_engine_up` and `llmgw_engine_scrape_seconds`."""
    gate = asyncio.Semaphore(CONCURRENCY)
    reps = sorted(table.replicas.values(), key=lambda r: r.id)

    async def one(rep: ReplicaRuntime) -> tuple[str | None, float]:
        async with gate:
            began = time.perf_counter()
            try:
                return await _fetch(session, keys, rep, timeout, max_bytes), time.perf_counter() - began
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
                return None, time.perf_counter() - began

    results = await asyncio.gather(*(one(r) for r in reps))
    up = GaugeMetricFamily("llmgw_engine_up", "1 when the router could read the replica engine's /metrics",
                           labels=["model", "replica"])
    took = GaugeMetricFamily("llmgw_engine_scrape_seconds", "How long reading the engine's /metrics took",
                             labels=["model", "replica"])
    families: dict[str, Metric] = {}
    for rep, (text, seconds) in zip(reps, results, strict=True):
        ok = text is not None
        if text is not None:
            try:
                _relabel(families, text, rep)
            except ValueError:  # not the text format: the engine counts as not read
                ok = False
        up.add_metric([rep.model, rep.id], 1 if ok else 0)
        took.add_metric([rep.model, rep.id], round(seconds, 6))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Page([up, took, *families.values()]))
    return generate_latest(registry)
