"""`llmgw replicas --downloads`: the weights module's progress file, read on the node
through playbooks/downloads.yml (real ansible-runner, local connection)."""

from __future__ import annotations

import json
from pathlib import Path

from llmgw.state import read_state, write_state
from llmgw.views.downloads import parse_progress, progress_path
from llmgw.weights.names import cache_name
from tests.support.cli import run_cli
from tests.views.test_logs import make_site


def test_a_download_in_progress_shows_under_its_replica(tmp_path: Path) -> None:
    make_site(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    inventory = json.loads((tmp_path / "hosts.yml").read_text())
    inventory["all"]["children"]["llmgw_nodes"]["hosts"]["here"]["llmgw_cache_dir"] = str(cache)
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    state = read_state(tmp_path / "state.json")
    replica = state.replicas[0]
    starting = replica.model_copy(update={"state": "starting", "shards": replica.shards[:1]})
    write_state(tmp_path / "state.json", state.model_copy(update={"replicas": [starting]}))
    name = cache_name("hf://x/y/tiny.gguf")
    Path(progress_path(str(cache), name)).write_text(json.dumps({"bytes": 3 * 2**30, "total": 9 * 2**30,
                                                                 "updated": 1.0}))

    r = run_cli("-C", str(tmp_path), "replicas", "--downloads", "--no-router", "--json")
    assert r.exit_code == 0, r.stderr
    (rec,) = json.loads(r.stdout)["replicas"]
    assert rec["downloads"] == [{"node": "here", "bytes": 3 * 2**30, "total": 9 * 2**30, "percent": 33.3,
                                 "rate": None, "eta_seconds": None,  # known only from apply's feed
                                 "text": "downloading on here: 3.0 GiB of 9.0 GiB (33%)"}]
    r = run_cli("-C", str(tmp_path), "replicas", "--downloads", "--no-router")
    lines = r.stdout.splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("tiny-1 "))
    assert lines[row + 1] == "  downloading on here: 3.0 GiB of 9.0 GiB (33%)"

    Path(progress_path(str(cache), name)).unlink()  # done: the module removes the file
    r = run_cli("-C", str(tmp_path), "replicas", "--downloads", "--no-router", "--json")
    assert json.loads(r.stdout)["replicas"][0]["downloads"] == []


def test_progress_without_a_total() -> None:
    assert parse_progress('{"bytes": 1024, "total": null}') == {"bytes": 1024, "total": None}
    assert parse_progress("not json") is None and parse_progress('{"total": 5}') is None
