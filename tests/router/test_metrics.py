"""RouterMetrics on its own: bounded labels, Prometheus exposition, merging across processes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from llmgw.router.metrics import RouterMetrics
from llmgw.router.table import RoutingTable
from llmgw.state import State
from tests.support.router import model, replica


def _table() -> RoutingTable:
    return RoutingTable(State(lineage="l", serial=3, models=[model("tiny")],
                              replicas=[replica("tiny-0", "tiny", "http://127.0.0.1:1")]))


def _samples(m: RouterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(m.render().decode()) for s in f.samples}


def test_labels_take_only_names_from_the_state() -> None:
    table = _table()
    m = RouterMetrics(lambda: table)
    m.request_done("tiny", 200, 0.2)
    m.request_done("sk-secret-or-anything", 404, 0.01)  # whatever a caller passes, not a label
    m.tokens_used("tiny-0", 5, 7)
    m.tokens_used("made-up-replica", 1, 1)
    got = _samples(m)
    assert got[("llmgw_requests_total", (("model", "tiny"), ("status", "200")))] == 1
    assert got[("llmgw_requests_total", (("model", "-"), ("status", "404")))] == 1
    assert got[("llmgw_tokens_total", (("kind", "completion"), ("model", "tiny"), ("replica", "tiny-0")))] == 7
    assert got[("llmgw_tokens_total", (("kind", "prompt"), ("model", "-"), ("replica", "-")))] == 1
    assert not any("sk-secret" in v for (_n, labels) in got for _k, v in labels)


def test_streams_give_ttft_and_inter_token_latency() -> None:
    table = _table()
    m = RouterMetrics(lambda: table)
    m.first_token("tiny-0", 0.3)
    m.stream_done("tiny-0", 0.9, 10)  # 10 tokens over 0.9 s from first to last: 0.1 s apart
    m.stream_done("tiny-0", 0.5, 1)  # one token: no gap to measure
    got = _samples(m)
    labels = (("model", "tiny"), ("replica", "tiny-0"))
    assert got[("llmgw_inter_token_latency_seconds_count", labels)] == 1
    assert abs(got[("llmgw_inter_token_latency_seconds_sum", labels)] - 0.1) < 1e-9
    assert got[("llmgw_inter_token_latency_seconds_bucket", (("le", "0.1"), *labels))] == 1
    assert got[("llmgw_inter_token_latency_seconds_bucket", (("le", "0.075"), *labels))] == 0
    assert got[("llmgw_time_to_first_token_seconds_count", labels)] == 1


def test_a_snapshot_merges_into_another_process() -> None:
    table = _table()
    a, b = RouterMetrics(lambda: table), RouterMetrics(lambda: table)
    for m, n in ((a, 2), (b, 3)):
        for _ in range(n):
            m.request_done("tiny", 200, 0.2)
            m.first_token("tiny-0", 0.05)
    a.absorb(b.snapshot())
    a.absorb({"counters": {"from_a_newer_version": [[["x"], 1]]}, "histograms": {}})
    got = _samples(a)
    assert got[("llmgw_requests_total", (("model", "tiny"), ("status", "200")))] == 5
    assert got[("llmgw_time_to_first_token_seconds_count", (("model", "tiny"), ("replica", "tiny-0")))] == 5
    assert got[("llmgw_request_duration_seconds_bucket", (("le", "0.25"), ("model", "tiny")))] == 5
