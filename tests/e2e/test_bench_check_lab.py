"""`llmgw bench` and `llmgw check` against the lab, from the control host, as an operator runs them.

One lab, one apply: the catalog's tiny model `requires: [chat, stream, completion]`, so
apply checks the new replica on its engine (with its engine key) before recording it
ready, and stores that run. Then bench and check go through the lab's router with a key
made in the router's store, and `llmgw models tiny` shows all three results. What the
tiny random model passes: chat, stream, completion; embeddings are unsupported (the
engine runs without --embeddings), tools and JSON mode fail (its chat template has no
tools, and llama-server's JSON grammar fails to set up for it) — asserted exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from llmgw.apply import hosts_for
from llmgw.site import Site
from tests.support.lab import TINY, Lab, lab, shape

pytestmark = [pytest.mark.lab, pytest.mark.engine]


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    required = TINY.replace("    source: file:///srv/models/tiny.gguf\n",
                            "    source: file:///srv/models/tiny.gguf\n    requires: [chat, stream, completion]\n")
    assert required != TINY
    # One host of its own (router and replica) rather than a turn on the shared lab: the
    # turn's clearing apply alone cost 53-65 s at load 7-12 (#33, 2026-12-04), starting and
    # removing a host 5-10 s, and nothing here needs a second host.
    with lab(tmp_path_factory.mktemp("bench-check"), nodes=1, prefix="llmgw-bench") as it:
        yield shape(it, catalog={"tiny.yaml": required})


def test_bench_and_check_tiny_store_results_that_models_shows(the_lab: Lab,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    the_lab.ok("apply", "--auto-approve")
    [rep] = the_lab.state.replicas
    assert rep.state == "ready"
    # A key in the router's own store, made on the router host (as the other lab tests make theirs).
    monkeypatch.setenv("LLMGW_API_KEY", hosts_for(Site.load(the_lab.site)).create_key("bench")["key"])
    monkeypatch.delenv("LLMGW_ROUTER_URL", raising=False)  # the router from the inventory, as operators get it

    bench = the_lab.ok("bench", "tiny", "--requests", "8", "--concurrency", "2", "--prompt-tokens", "32",
                       "--max-tokens", "16", "--json")
    fig = json.loads(bench.stdout)
    assert fig["router"] == the_lab.router_url
    assert (fig["requests"], fig["ok"], fig["errors"]) == (8, 8, 0), fig["errors_by_kind"]
    assert fig["output_tokens"] == 8 * 16 and fig["ttft_p50_ms"] > 0
    # Measured for every stream (two tokens or more). Not > 0: the tiny model makes a token in
    # well under a millisecond, so on a busy machine a stream's tokens can reach the client in
    # one read, and its gaps round to 0.0 ms (seen once with two lab processes on two cores).
    assert fig["itl_p90_ms"] >= fig["itl_p50_ms"] >= 0
    assert (fig["profiles"], fig["engine"], fig["nodes"]) == ("cpu", "llamacpp", rep.shards[0].node)
    assert fig["engine_version"].startswith("b")  # llama-server's build, from its answers

    check = the_lab.cli("check", "tiny", "--json")
    assert check.exit_code == 0, check.stdout + check.stderr
    statuses = {c["capability"]: c["status"] for c in json.loads(check.stdout)["checks"]}
    assert statuses == {"chat": "pass", "stream": "pass", "completion": "pass", "embeddings": "unsupported",
                        "tools": "fail", "json": "fail"}

    shown = the_lab.ok("models", "tiny", "--no-router", "--json")
    view = json.loads(shown.stdout)
    assert [b["id"] for b in view["bench"]] == [fig["id"]]
    runs = view["checks"]
    assert [r["replica"] for r in runs] == [None, rep.id]  # ours through the router, then apply's on the engine
    assert {c["capability"]: c["status"] for c in runs[1]["checks"]} == {"chat": "pass", "stream": "pass",
                                                                         "completion": "pass"}
    text = the_lab.ok("models", "tiny", "--no-router")
    assert "Benchmarks" in text.stdout and "Capability checks" in text.stdout
    print("lab bench:", {k: fig[k] for k in ("ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "itl_p90_ms",
                                              "output_tokens_per_s", "duration_s")}, os.cpu_count(), "CPUs")
