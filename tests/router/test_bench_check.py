"""`llmgw bench` and `llmgw check` through a real router in front of the real llama-server
(the lab's engine and tiny random model), their results in the store, and `llmgw models
MODEL` showing them; apply's check of a new replica on its engine, with its engine key.

What the tiny model can pass is what the engine guarantees: chat, stream and completion.
llama-server started without --embeddings says it serves none (unsupported); the tiny
model's chat template has no tools, so `tool_choice: required` gets text back (fail);
JSON mode fails in llama-server's sampler set-up for this template (fail, the engine's
own message). These tests assert exactly that, so a change in any of them shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.apply.engine_keys import EngineKeyring
from llmgw.errors import LlmgwError, RunnerError
from llmgw.planner.schema import PlannedReplica, PlannedShard
from llmgw.probe.bench import Sample, percentile, summarize
from llmgw.probe.verify import replica_verifier
from llmgw.site import Site
from llmgw.store import open_store
from llmgw.weights.names import cache_name
from tests.support.cli import Result, run_cli
from tests.support.router import HTTP, Engine, RunningRouter, StateFile, model, replica

pytestmark = pytest.mark.engine

TINY = """models:
  - name: tiny
    aliases: [tiny-chat]
    source: file:///srv/models/tiny.gguf
    requires: [{requires}]
    profiles:
      - name: cpu
        engine: llamacpp
"""


def make_site(root: Path, requires: str = "") -> Path:
    (root / "catalog").mkdir(exist_ok=True)
    (root / "catalog" / "tiny.yaml").write_text(TINY.format(requires=requires))
    (root / "llmgw.yaml").write_text(f"state: state.json\nstore: sqlite:///{root}/results.sqlite\n")
    return root


def llmgw(site: Path, *args: str) -> Result:
    return run_cli("-C", str(site), *args)


@pytest.fixture
def served(engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
           tmp_path: Path) -> tuple[Engine, RunningRouter]:
    e = engines("tiny")
    state.write([model("tiny", aliases=("tiny-chat",))], [replica("tiny-0", "tiny", e.endpoint)])
    make_site(tmp_path)
    return e, start_router(state.path)


def build_info(e: Engine) -> str:
    return str(HTTP.get(e.endpoint + "/props").json()["build_info"])


def test_bench_measures_through_the_router_stores_and_models_shows_it(
        served: tuple[Engine, RunningRouter], api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, router = served
    monkeypatch.setenv("LLMGW_API_KEY", api_key)
    done = llmgw(tmp_path, "bench", "tiny-chat", "--requests", "6", "--concurrency", "2", "--prompt-tokens", "16",
                 "--max-tokens", "8", "--router-url", router.base_url, "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    fig = json.loads(done.stdout)
    assert (fig["model"], fig["profiles"], fig["engine"], fig["nodes"]) == ("tiny", "cpu", "llamacpp", "localhost")
    assert (fig["requests"], fig["ok"], fig["errors"], fig["errors_by_kind"]) == (6, 6, 0, {})
    assert fig["output_tokens"] == 6 * 8 and fig["mean_output_tokens"] == 8  # end-of-sequence ignored
    assert fig["mean_prompt_tokens"] >= 16
    assert 0 < fig["ttft_p50_ms"] <= fig["ttft_p90_ms"] and 0 < fig["itl_p50_ms"] <= fig["itl_p90_ms"]
    assert fig["output_tokens_per_s"] == pytest.approx(48 / fig["duration_s"], rel=0.01)
    assert fig["engine_version"] == build_info(engine)
    # Through the router: it counted the warm-up and the six for the key.
    usage = {k["name"]: k for k in router.admin("/api/v1/usage")["keys"]}["tester"]
    assert usage["requests"] == 7 and usage["completion_tokens"] == 6 * 8 + 1

    stored = open_store(f"sqlite:///{tmp_path}/results.sqlite")
    try:
        [rec] = stored.bench_results("tiny")
    finally:
        stored.close()
    assert (rec.id, rec.requests, rec.errors, rec.concurrency, rec.max_tokens) == (fig["id"], 6, 0, 2, 8)

    shown = llmgw(tmp_path, "models", "tiny", "--no-router", "--json")
    assert shown.exit_code == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["model"]["name"] == "tiny" and [b["id"] for b in view["bench"]] == [fig["id"]]
    assert view["bench"][0]["ttft_p50_ms"] == fig["ttft_p50_ms"] and view["checks"] == []
    monkeypatch.setenv("COLUMNS", "200")
    text = llmgw(tmp_path, "models", "--no-router", "tiny-chat")
    assert text.exit_code == 0, text.stderr
    assert "Benchmarks" in text.stdout and build_info(engine) in text.stdout and "No capability checks" in text.stdout
    assert llmgw(tmp_path, "models", "nope", "--no-router").exit_code == 2

    again = llmgw(tmp_path, "bench", "tiny", "-n", "2", "--max-tokens", "4", "--router-url", router.base_url)
    assert again.exit_code == 0, again.stderr
    assert "TTFT p50 / p90" in again.stdout and "2 ok, 0 errors" in again.stdout
    assert "Stored as bench run" in again.stdout


def test_bench_refuses_a_bad_key_and_stores_nothing(served: tuple[Engine, RunningRouter], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _, router = served
    monkeypatch.setenv("LLMGW_API_KEY", "sk-llmgw-not-a-key")
    done = llmgw(tmp_path, "bench", "tiny", "-n", "2", "--router-url", router.base_url)
    assert done.exit_code == 1 and "refused the API key" in done.stderr and "Traceback" not in done.stderr
    monkeypatch.delenv("LLMGW_API_KEY")
    missing = llmgw(tmp_path, "bench", "tiny", "-n", "2", "--router-url", router.base_url)
    assert missing.exit_code == 2 and "LLMGW_API_KEY" in missing.stderr
    (tmp_path / "key").write_text("two\nlines\n")
    two = llmgw(tmp_path, "bench", "tiny", "--key-file", str(tmp_path / "key"), "--router-url", router.base_url)
    assert two.exit_code == 2 and "one API key on one line" in two.stderr
    both = llmgw(tmp_path, "bench", "tiny", "-n", "2", "--duration", "1")
    assert both.exit_code == 2 and "exclude each other" in both.stderr
    assert open_store(f"sqlite:///{tmp_path}/results.sqlite").bench_results("tiny") == []


def test_check_reports_what_the_tiny_model_can_do_and_requires_decides_the_exit(
        served: tuple[Engine, RunningRouter], api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, router = served
    monkeypatch.setenv("LLMGW_API_KEY", api_key)
    make_site(tmp_path, requires="chat, stream, completion")
    done = llmgw(tmp_path, "check", "tiny", "--router-url", router.base_url, "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    statuses = {c["capability"]: c["status"] for c in out["checks"]}
    assert statuses == {"chat": "pass", "stream": "pass", "completion": "pass", "embeddings": "unsupported",
                        "tools": "fail", "json": "fail"}
    details = {c["capability"]: c["detail"] for c in out["checks"]}
    assert "--embeddings" in details["embeddings"] and "no tool call" in details["tools"]
    assert "HTTP 400" in details["json"]
    assert out["required"] == ["chat", "stream", "completion"] and out["engine_version"] == build_info(engine)

    required = llmgw(tmp_path, "check", "tiny", "--only", "tools", "--router-url", router.base_url)
    assert required.exit_code == 1 and "lacks required capabilities: tools" in required.stderr
    assert "fail" in required.stdout

    view = json.loads(llmgw(tmp_path, "models", "tiny", "--no-router", "--json").stdout)
    assert [len(r["checks"]) for r in view["checks"]] == [1, 6]  # newest run first
    assert view["checks"][1]["run_id"] == out["run_id"] and view["checks"][1]["replica"] is None
    assert view["model"]["requires"] == ["chat", "stream", "completion"]


def test_catalog_requires_names_known_capabilities_at_file_and_line(tmp_path: Path) -> None:
    make_site(tmp_path, requires="chat, tool")
    done = llmgw(tmp_path, "catalog", "validate", "--offline")
    assert done.exit_code == 1
    assert "catalog/tiny.yaml:5: models[0].requires[1]: 'tool' is not allowed" in done.stderr, done.stderr


def test_apply_check_goes_to_the_engine_with_its_key_and_stores_the_verdict(
        engines: Callable[..., Engine], tmp_path: Path) -> None:
    keys = EngineKeyring(tmp_path / "engine-keys.secret")
    e = engines("tiny", extra=("--api-key", keys.key("tiny-7")))
    site = Site.load(make_site(tmp_path, requires="chat, stream"))
    source = "file:///srv/models/tiny.gguf"
    new = PlannedReplica(id="tiny-7", model="tiny", profile="cpu", engine="llamacpp", endpoint=e.endpoint,
                         spec_hash="0123456789abcdef", status="new", source=source, cache_name=cache_name(source),
                         args=[], env={},
                         shards=[PlannedShard(node="node1", rank=0, port=e.port, unit="llmgw-tiny-7-0.service",
                                              address="127.0.0.1")])
    said: list[str] = []
    replica_verifier(site, keys.key, said.append)([new])  # passes: nothing raised
    assert said == [f"Checking tiny-7 at {e.endpoint} for chat, stream"]

    site = Site.load(make_site(tmp_path, requires="chat, json"))
    with pytest.raises(RunnerError) as failed:
        replica_verifier(site, keys.key)([new])
    assert failed.value.detail[0].startswith("tiny-7: json: fail: json: HTTP 400")

    with pytest.raises(LlmgwError) as wrong_key:  # a key the engine does not know is no verdict on it
        replica_verifier(site, lambda rid: "llmgw-engine-wrong")([new])
    assert "refused the API key" in wrong_key.value.message

    runs = open_store(site.store_url).check_results("tiny")
    assert {(r.replica, r.capability, r.status) for r in runs} == {
        ("tiny-7", "chat", "pass"), ("tiny-7", "stream", "pass"), ("tiny-7", "json", "fail")}


def test_summary_statistics() -> None:
    assert percentile([], 50) is None
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5 and percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    ok = [Sample(ok=True, started=0, ttft=t, itl=t / 10, output_tokens=10, prompt_tokens=5) for t in (0.1, 0.2, 0.3)]
    bad = [Sample(ok=False, started=0, error="HTTP 503: no replica"), Sample(ok=False, started=0, error="timed out"),
           Sample(ok=False, started=0, error="HTTP 503: no replica")]
    fig = summarize(ok + bad, 2.0)
    assert (fig["requests"], fig["ok"], fig["errors"]) == (6, 3, 3)
    assert fig["errors_by_kind"] == {"HTTP 503: no replica": 2, "timed out": 1}
    assert fig["output_tokens_per_s"] == 15.0 and fig["ttft_p50_ms"] == 200.0 and fig["itl_p90_ms"] == 28.0
    assert summarize(bad, 1.0)["ttft_p50_ms"] is None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/store.sqlite" if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


def test_results_round_trip_and_migrate_from_schema_2(store_url: str) -> None:
    from datetime import UTC, datetime, timedelta

    from llmgw.store import BenchRecord, CheckRecord
    from llmgw.store.sql import SCHEMA_VERSION

    store = open_store(store_url)
    try:  # a store of schema 2 (before results): the new tables dropped, the version put back
        store._run(lambda cur: [store._x(cur, sql) for sql in (
            "DROP TABLE llmgw_bench_results", "DROP TABLE llmgw_check_results",
            "UPDATE llmgw_meta SET value = '2' WHERE key = 'schema_version'")])
    finally:
        store.close()
    store = open_store(store_url)
    try:
        t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        for i in range(3):
            store.add_bench(BenchRecord(f"b{i}", "m", "cpu", "llamacpp", f"b{i}-abc", "n1,n2",
                                        t0 + timedelta(minutes=i), 4, 32, i, 128, 64, 1.5, 99.5,
                                        None if i == 0 else 10.0 * i, 20.0, 1.0, 2.0))
        store.add_bench(BenchRecord("other", "x", "cpu", "llamacpp", "v", "n1", t0, 1, 1, 0, 1, 1, 1.0, 1.0,
                                    1.0, 1.0, 1.0, 1.0))
        newest = store.bench_results("m", limit=2)
        assert [b.id for b in newest] == ["b2", "b1"] and newest[0].ttft_p50_ms == 20.0
        assert store.bench_results("m")[-1].ttft_p50_ms is None and store.bench_results("m")[-1].nodes == "n1,n2"
        for run in range(3):
            store.add_checks([CheckRecord(f"r{run}", "m", cap, "pass", "ok", "cpu", "llamacpp", "v", "n1",
                                          t0 + timedelta(minutes=run), "m-1" if run == 1 else None)
                              for cap in ("chat", "stream")])
        got = store.check_results("m", runs=2)
        assert [(c.run_id, c.capability) for c in got] == [("r2", "chat"), ("r2", "stream"), ("r1", "chat"),
                                                           ("r1", "stream")]
        assert got[2].replica == "m-1" and got[0].replica is None
        version = store._run(lambda cur: (store._x(cur, "SELECT value FROM llmgw_meta WHERE key = 'schema_version'"),
                                          cur.fetchone()[0])[1])
        assert int(version) == SCHEMA_VERSION >= 3  # a store of schema 2 migrated to the current one
    finally:
        store.close()
