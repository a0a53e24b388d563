"""`llmgw keys ...` in-process: create prints the key once, list/revoke, groups, usage, --store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw.store import MinuteCount, UsageDelta, open_store
from llmgw.store.keys import hash_key
from tests.support.cli import run_cli


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/keys.sqlite"


def test_create_prints_the_key_once_and_list_never_shows_it(url: str) -> None:
    r = run_cli("keys", "create", "alice", "--store", url)
    assert r.exit_code == 0, r.stderr
    secret = r.stdout.strip()
    assert secret.startswith("sk-llmgw-") and "cannot be shown again" in r.stderr
    store = open_store(url)
    assert store.list_keys()[0].hash == hash_key(secret)
    listed = run_cli("keys", "list", "--store", url)
    assert listed.exit_code == 0 and "alice" in listed.stdout and secret not in listed.stdout
    data = json.loads(run_cli("keys", "list", "--json", "--store", url).stdout)
    assert [k["name"] for k in data["keys"]] == ["alice"] and "key" not in data["keys"][0]
    assert secret not in json.dumps(data)


def test_create_json_includes_the_key(url: str) -> None:
    data = json.loads(run_cli("keys", "create", "bob", "--json", "--store", url).stdout)
    assert data["key"].startswith("sk-llmgw-") and data["name"] == "bob" and data["active"] is True


def test_revoke_and_list_all(url: str) -> None:
    run_cli("keys", "create", "alice", "--store", url)
    r = run_cli("keys", "revoke", "alice", "--store", url)
    assert r.exit_code == 0 and "Revoked key 'alice'" in r.stdout
    assert "No keys" in run_cli("keys", "list", "--store", url).stdout
    assert "revoked" in run_cli("keys", "list", "--all", "--store", url).stdout
    again = run_cli("keys", "revoke", "alice", "--store", url)
    assert again.exit_code == 1 and "Error: no active key named 'alice'" in again.stderr


def test_groups_with_limits(url: str) -> None:
    assert run_cli("keys", "group", "set", "org", "--tokens-per-day", "100000", "--store", url).exit_code == 0
    r = run_cli("keys", "group", "set", "team", "--parent", "org", "--rpm", "60", "--store", url)
    assert r.exit_code == 0 and "60 requests/minute" in r.stdout
    r = run_cli("keys", "group", "set", "team", "--rpm", "unlimited", "--store", url)
    assert "unlimited requests/minute" in r.stdout
    bad = run_cli("keys", "group", "set", "team", "--rpm", "0", "--store", url)
    assert bad.exit_code == 2 and "unlimited" in bad.stderr
    loop = run_cli("keys", "group", "set", "org", "--parent", "team", "--store", url)
    assert loop.exit_code == 1 and "loop" in loop.stderr
    run_cli("keys", "create", "k1", "--group", "team", "--store", url)
    data = json.loads(run_cli("keys", "group", "list", "--json", "--store", url).stdout)
    assert {g["name"]: (g["parent"], g["rpm"], g["tokens_per_day"], g["keys"]) for g in data["groups"]} == {
        "org": (None, None, 100000, 0), "team": ("org", None, None, 1)}
    nogroup = run_cli("keys", "create", "k2", "--group", "ghost", "--store", url)
    assert nogroup.exit_code == 1 and "keys group set ghost" in nogroup.stderr
    busy = run_cli("keys", "group", "delete", "team", "--store", url)
    assert busy.exit_code == 1 and "key k1" in busy.stderr


def test_usage_per_key_and_group_subtree(url: str) -> None:
    run_cli("keys", "group", "set", "org", "--store", url)
    run_cli("keys", "group", "set", "team", "--parent", "org", "--store", url)
    run_cli("keys", "create", "k1", "--group", "team", "--store", url)
    store = open_store(url)
    kid = store.list_keys()[0].id
    store.add_usage([UsageDelta(kid, "2026-02-03", "m", 2, 5, 7)], [MinuteCount(kid, 1, 2)])
    data = json.loads(run_cli("keys", "usage", "--day", "2026-02-03", "--json", "--store", url).stdout)
    assert data["keys"] == [{"id": kid, "name": "k1", "group": "team", "requests": 2, "prompt_tokens": 5,
                             "completion_tokens": 7, "total_tokens": 12}]
    assert {g["name"]: g["total_tokens"] for g in data["groups"]} == {"org": 12, "team": 12}
    table = run_cli("keys", "usage", "--day", "2026-02-03", "--store", url).stdout
    assert "k1" in table and "12" in table


def test_store_defaults_site_then_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMGW_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    assert run_cli("keys", "create", "outside").exit_code == 0
    assert (tmp_path / "data" / "llmgw" / "store.sqlite").is_file()
    site = tmp_path / "site"
    site.mkdir()
    (site / "llmgw.yaml").write_text("state: run/state.json\n")
    assert run_cli("-C", str(site), "keys", "create", "inside").exit_code == 0
    assert (site / "run" / "llmgw-store.sqlite").is_file()
    monkeypatch.setenv("LLMGW_STORE", f"sqlite:///{tmp_path}/env.sqlite")
    assert run_cli("keys", "create", "env").exit_code == 0
    assert (tmp_path / "env.sqlite").is_file()


def test_broken_site_is_an_error_not_another_store(tmp_path: Path) -> None:
    (tmp_path / "llmgw.yaml").write_text("stor: typo\n")
    r = run_cli("-C", str(tmp_path), "keys", "list")
    assert r.exit_code == 1 and "llmgw.yaml:1: stor: Extra inputs are not permitted" in r.stderr


def test_bad_store_url_is_an_error(tmp_path: Path) -> None:
    r = run_cli("keys", "list", "--store", "redis://x")
    assert r.exit_code == 1 and "Error: unknown store URL" in r.stderr
