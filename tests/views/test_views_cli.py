"""`llmgw status/models/replicas` on the example site, text and --json, through the CLI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.cli import views_cmd
from llmgw.views import status
from tests.support.cli import run_cli
from tests.support.example_site import example_site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield example_site(tmp_path_factory.mktemp("cli"))


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_status_fits_100_columns_and_names_the_unplaceable(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    r = run_cli("-C", str(site), "status", "--no-router")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 100, [ln for ln in lines if len(ln) > 100]
    text = r.stdout
    assert "Cannot be placed (3; `llmgw explain MODEL` says why):" in text
    for model in ("grok-1", "llama-3.1-405b", "llama-4-maverick"):
        assert f"  {model}" in text
    h100 = next(ln for ln in lines if ln.lstrip().startswith("H100-80GB"))
    assert h100.split()[-5:] == ["24", "30", "8", "2", "64"]
    assert "ib-0c42a10300b20000  H100-80GB    3 of 8   free   1 degraded cable, rails misaligned" in text
    assert "Replicas  4: 3 ready, 1 starting, 0 draining" in text
    assert "Idle replicas (no request for 1h): not known, no router answered" in text


def test_status_json(site: Path, closed_port: int) -> None:
    r = run_cli("-C", str(site), "status", "--json", "--router", f"http://127.0.0.1:{closed_port}")
    assert r.exit_code == 0, r.stderr
    view = json.loads(r.stdout)
    assert [u["model"] for u in view["unplaceable"]] == ["grok-1", "llama-3.1-405b", "llama-4-maverick"]
    assert {c["gpu_class"]: c["unhealthy"] for c in view["capacity"]} == {"A100-40GB": 0, "H100-80GB": 2,
                                                                          "H200-141GB": 2, "L40S-48GB": 0}
    assert view["idle"] is None
    assert any(f"127.0.0.1:{closed_port} did not answer" in n for n in view["notes"])


def test_models_text_and_json(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    r = run_cli("-C", str(site), "models", "--no-router")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "ALIASES", "SERVING", "REPLICAS", "STATUS", "WEIGHTS", "COMMIT"]
    # The pinned commit and the weights' size `catalog validate` recorded; "-" where there is none.
    rows = {ln.split()[0]: ln.split()[-3:] for ln in lines[1:8]}
    assert rows["llama-3.1-70b"] == ["131.4", "GB", "11b38f4daf0a"]
    assert rows["qwen2.5-7b"] == ["4.4", "GB", "-"]
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("grok-1 "))
    assert row.split()[-6:-3] == ["0/1", "not", "placed"]
    assert "not placed: `llmgw explain MODEL` says why" in r.stdout
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 100
    r = run_cli("-C", str(site), "models", "--json", "--no-router")
    data = json.loads(r.stdout)
    assert {m["name"]: m["status"] for m in data["models"]}["qwen2.5-7b"] == "on demand"
    by_name = {m["name"]: m for m in data["models"]}
    assert (by_name["llama-3.1-70b"]["commit"], by_name["llama-3.1-70b"]["weights_bytes"]) == (
        "11b38f4daf0a29ecda154f991856fa61872a7c11", 141107412992)
    assert (by_name["qwen2.5-7b"]["commit"], by_name["qwen2.5-7b"]["weights_bytes"]) == (None, 4683073536)
    assert data["counts"] == {"ready": 2, "starting": 1, "not placed": 3, "not moved": 0, "stopped": 0, "on demand": 1}


def test_replicas_text_json_and_model_filter(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    r = run_cli("-C", str(site), "replicas", "--no-router")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["REPLICA", "SHARDS", "STATE", "AGE", "IDLE", "IN-FLIGHT", "ENDPOINT"]
    deepseek = next(ln for ln in lines if ln.startswith("deepseek-v3-1 "))
    assert deepseek.split()[1:4] == ["gpu-node-01:0-7", "gpu-node-02:0-7", "ready"]
    assert deepseek.split()[5] == "?"  # no router asked: idle not known
    r = run_cli("-C", str(site), "replicas", "--model", "coder", "--json", "--no-router")
    data = json.loads(r.stdout)
    assert [x["id"] for x in data["replicas"]] == ["qwen2.5-coder-14b-1"]
    assert data["replicas"][0]["state"] == "starting" and data["replicas"][0]["used"] is None
    r = run_cli("-C", str(site), "replicas", "--model", "nope", "--no-router")
    assert r.exit_code == 2 and "no model 'nope'" in r.stderr


def test_logs_of_an_unknown_replica(site: Path) -> None:
    r = run_cli("-C", str(site), "logs", "nope-1")
    assert r.exit_code == 1
    assert "no replica 'nope-1' in the state" in r.stderr and "deepseek-v3-1" in r.stderr


def test_the_cli_shares_the_views_defaults_without_loading_the_views() -> None:
    """One source for the defaults; `llmgw --help` loads no view (they pull in the planner and httpx)."""
    assert views_cmd.IDLE_AFTER is status.IDLE_AFTER
    code = "import sys, llmgw.cli; print(' '.join(m for m in sys.modules if m.startswith('llmgw.views.')))"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ran.stdout.split())
    assert loaded <= {"llmgw.views.defaults", "llmgw.views.text"}, loaded  # text: formatting only
