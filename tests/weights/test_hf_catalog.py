"""Whole Hugging Face repositories on the control side, against the olah mirror: `catalog validate`
resolves the revision to a commit and reports the size; `plan` pins the commit offline."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.hf_mirror import HfMirror
from tests.support.recording_server import recording_server

HOSTS = """\
all:
  children:
    llmgw_nodes:
      hosts:
        n1: {ansible_host: 127.0.0.1, llmgw_mgmt_address: 127.0.0.1}
"""


def catalog(source: str, extra: str = "") -> str:
    return f"""
        models:
          - name: tiny-hf
            source: {source}
            {extra}
            profiles:
              - {{name: cpu, engine: vllm, gpus: 0, min_memory_gb: 1}}
        """


def make(site: Callable[..., Path], mirror: str, cat: str) -> Path:
    return site(files={"catalog/m.yaml": cat, "hosts.yml": HOSTS}, config=f"mirror: {mirror}\ninventory: hosts.yml\n")


def planned(root: Path) -> list[dict[str, object]]:
    res = run_cli("-C", str(root), "plan", "--json")
    assert res.exit_code == 0, res.stdout + res.stderr
    found: list[dict[str, object]] = []

    def walk(o: object) -> None:
        if isinstance(o, dict):
            if "source" in o and "cache_name" in o:
                found.append(o)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(json.loads(res.stdout))
    return found


def test_validate_reports_the_commit_and_size_then_plan_pins_it_offline(
        hf_mirror: HfMirror, site: Callable[..., Path]) -> None:
    root = make(site, hf_mirror.url, catalog(f"hf://{hf_mirror.repo}"))
    res = run_cli("-C", str(root), "catalog", "validate")
    assert res.exit_code == 0, res.stdout + res.stderr
    size = sum(p.stat().st_size for p in hf_mirror.files.iterdir() if p.is_file())
    assert f"hf://{hf_mirror.repo}@main: commit {hf_mirror.commit}, {len(hf_mirror.file_names())} files" in res.stdout
    assert f"({size} bytes)" in res.stdout
    # Offline from here: the mirror named in llmgw.yaml is now unreachable.
    (root / "llmgw.yaml").write_text("mirror: http://127.0.0.1:9\ninventory: hosts.yml\n")
    [replica] = planned(root)
    assert replica["source"] == f"hf://{hf_mirror.repo}@{hf_mirror.commit}"
    assert str(replica["cache_name"]).endswith("-tiny-llama")
    assert run_cli("-C", str(root), "catalog", "validate", "--offline").exit_code == 0


def test_include_exclude_are_sized_and_pinned(hf_mirror: HfMirror, site: Callable[..., Path]) -> None:
    root = make(site, hf_mirror.url, catalog(f"hf://{hf_mirror.repo}@main", 'include: ["*.json"]\n'
                                                                           '            exclude: [config.json]'))
    res = run_cli("-C", str(root), "catalog", "validate")
    assert res.exit_code == 0, res.stdout + res.stderr
    chosen = [p for p in hf_mirror.files.iterdir() if p.suffix == ".json" and p.name != "config.json"]
    assert f"{len(chosen)} files" in res.stdout and f"({sum(p.stat().st_size for p in chosen)} bytes)" in res.stdout
    [replica] = planned(root)
    assert replica["source"] == f"hf://{hf_mirror.repo}@{hf_mirror.commit}?include=*.json&exclude=config.json"


def test_an_unresolved_repository_is_not_placed(site: Callable[..., Path]) -> None:
    root = make(site, "http://127.0.0.1:9", catalog("hf://org/never-validated"))
    res = run_cli("-C", str(root), "plan")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "hf://org/never-validated@main is not pinned to a commit" in res.stdout
    assert planned(root) == []


def test_validate_asks_only_the_configured_mirror_and_follows_no_redirect(
        hf_mirror: HfMirror, site: Callable[..., Path]) -> None:
    with recording_server("127.0.0.2", upstream=hf_mirror.url) as elsewhere, \
            recording_server("127.0.0.1", redirect=lambda p: elsewhere.url + p) as mirror:
        root = make(site, mirror.url, catalog(f"hf://{hf_mirror.repo}"))
        res = run_cli("-C", str(root), "catalog", "validate")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "HTTP 302" in res.stderr and mirror.seen and not elsewhere.seen


def test_patterns_only_on_whole_repositories(site: Callable[..., Path]) -> None:
    root = make(site, "http://127.0.0.1:9", catalog("hf://org/repo/model.gguf", 'include: ["*.gguf"]'))
    res = run_cli("-C", str(root), "catalog", "validate", "--offline")
    assert res.exit_code == 1 and "include/exclude select files of a whole repository" in res.stderr


def test_validate_sends_no_token_over_plain_http(hf_mirror: HfMirror, site: Callable[..., Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_control_host_token")
    with recording_server("127.0.0.1", upstream=hf_mirror.url) as mirror:
        root = make(site, mirror.url, catalog(f"hf://{hf_mirror.repo}"))
        res = run_cli("-C", str(root), "catalog", "validate")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert mirror.seen and mirror.auths() == {None}


def test_a_moved_revision_replaces_the_replica_visibly() -> None:
    """The planner sees a whole repository as validate pinned it: when `main` moves to another
    commit (a later `catalog validate --refresh`), the replica is replaced with a reason, never
    left serving under an entry whose weights changed."""
    from llmgw.planner import make_plan
    from llmgw.state import State
    from tests.support.plan_inputs import cpu_profile, facts, host, inputs, model

    def pinned(commit: str) -> list[object]:
        return [model("big", cpu_profile(), source=f"hf://org/big@{commit}")]

    nodes, fleet = [host("a")], [facts("a", 0)]
    first = make_plan(inputs(pinned("a" * 40), nodes, fleet))
    state = first.applied(State(lineage="test"))
    assert [r.source for r in state.replicas] == ["hf://org/big@" + "a" * 40]
    assert not make_plan(inputs(pinned("a" * 40), nodes, fleet, state=state)).has_changes
    moved = make_plan(inputs(pinned("b" * 40), nodes, fleet, state=state))
    [action] = [a for a in moved.actions if a.replaces]
    assert action.code == "definition_changed"
    new = next(r for r in moved.desired.replicas if r.id == action.replica)
    assert new.source == "hf://org/big@" + "b" * 40 and new.cache_name != state.replicas[0].cache_name


def test_the_disk_filter_uses_the_cached_repository_size(hf_mirror: HfMirror, site: Callable[..., Path]) -> None:
    from datetime import UTC, datetime

    from llmgw.facts import Filesystem, HostFacts
    from llmgw.facts.cache import write_facts

    root = make(site, hf_mirror.url, catalog(f"hf://{hf_mirror.repo}"))
    assert run_cli("-C", str(root), "catalog", "validate").exit_code == 0
    (root / "llmgw.yaml").write_text("mirror: http://127.0.0.1:9\ninventory: hosts.yml\n")  # offline from here
    size = sum((hf_mirror.files / n).stat().st_size for n in hf_mirror.file_names())

    def free(n: int) -> None:
        fs = Filesystem(mount="/", device="/dev/sda1", fstype="ext4", shared=False, free_bytes=n,
                        total_bytes=10**12, paths=["/var/cache/llmgw"])
        write_facts(root / "facts", HostFacts(host="n1", gathered_at=datetime.now(UTC), cpus=4,
                                              memory_total_mb=8192, gpus=[], filesystems=[fs]))

    free(size - 1)
    res = run_cli("-C", str(root), "plan")
    assert res.exit_code == 0 and planned(root) == [] and "weights need" in res.stdout, res.stdout
    free(size)
    assert [r["source"] for r in planned(root)] == [f"hf://{hf_mirror.repo}@{hf_mirror.commit}"]
