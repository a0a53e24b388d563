"""`llmgw keys ...` in-process: create prints the key once, list/revoke, groups, usage, --store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from llmgw.store import MinuteCount, UsageDelta, open_store
from llmgw.store.keys import hash_key
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def routed_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A site whose one router is this host (ansible_connection: local), installed as the router
    role lays it out: <install>/current/venv/bin/llmgw, <config>/router.env naming its store."""
    monkeypatch.delenv("LLMGW_STORE", raising=False)
    install = tmp_path / "router"
    (install / "current" / "venv" / "bin").mkdir(parents=True)
    (install / "current" / "venv" / "bin" / "llmgw").symlink_to(Path(sys.executable).parent / "llmgw")
    config = tmp_path / "etc"
    config.mkdir(mode=0o700)
    router_store = f"sqlite:///{tmp_path}/router-home/store.sqlite"
    (config / "router.env").write_text(f'LLMGW_STORE="{router_store}"\n')
    site = tmp_path / "site"
    site.mkdir()
    (site / "llmgw.yaml").write_text("inventory: hosts.yml\n")
    (site / "hosts.yml").write_text(json.dumps({"llmgw_routers": {"hosts": {"router-1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "llmgw_router_install_dir": str(install), "llmgw_router_config_dir": str(config),
        "llmgw_router_user": "root"}}}}))
    return site, router_store


@pytest.mark.root
@pytest.mark.slow
def test_keys_act_on_the_router_hosts_store_and_the_key_never_passes_through_ansible(
        routed_site: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    site, router_store = routed_site
    log = tmp_path / "ansible.log"  # what Ansible logs, task arguments included
    monkeypatch.setenv("ANSIBLE_LOG_PATH", str(log))
    monkeypatch.setenv("ANSIBLE_DISPLAY_ARGS_TO_STDOUT", "True")
    tasks = yaml.safe_load((REPO / "playbooks" / "router_keys.yml").read_text())[0]["tasks"]
    holder = next(t for t in tasks if "stdin" in t["ansible.builtin.command"])
    assert holder["no_log"] is True  # the key on stdin: out of results, callbacks and the host's syslog
    made = run_cli("-C", str(site), "keys", "create", "alice", "--json")
    assert made.exit_code == 0, made.stdout + made.stderr
    data = json.loads(made.stdout)
    secret = data["key"]
    assert data["store"].startswith("the key store of router router-1") and router_store in data["store"]
    assert not (site / "llmgw-store.sqlite").exists()  # nothing beside the state on the bastion
    router = open_store(router_store)
    assert [(k.name, k.hash, k.id) for k in router.list_keys()] == [("alice", hash_key(secret), data["id"])]
    logged = log.read_text()
    assert "Report what llmgw keys said" in logged and data["id"] in logged  # the log did record the run
    assert secret not in logged and secret[len("sk-llmgw-"):] not in logged

    text = run_cli("-C", str(site), "keys", "list")
    assert text.exit_code == 0 and "alice" in text.stdout and "Store: the key store of router router-1" in text.stderr
    assert run_cli("-C", str(site), "keys", "group", "set", "team", "--rpm", "60").exit_code == 0
    assert router.list_groups()[0].rpm == 60
    busy = run_cli("-C", str(site), "keys", "create", "alice")  # the router host's refusal, in its words
    assert busy.exit_code == 1 and "an active key named 'alice' exists (router router-1's store)" in busy.stderr
    assert run_cli("-C", str(site), "keys", "revoke", "alice").exit_code == 0
    assert router.list_keys() == []
    usage = json.loads(run_cli("-C", str(site), "keys", "usage", "--json").stdout)
    assert usage["keys"] == [] and "router-1" in usage["store"]


def test_the_site_store_setting_wins_over_the_routers(routed_site: tuple[Path, str], tmp_path: Path) -> None:
    site, _ = routed_site
    (site / "llmgw.yaml").write_text(f"inventory: hosts.yml\nstore: sqlite:///{tmp_path}/shared.sqlite\n")
    r = run_cli("-C", str(site), "keys", "create", "bob")
    assert r.exit_code == 0 and f"sqlite:///{tmp_path}/shared.sqlite (llmgw.yaml store:)" in r.stderr
    assert open_store(f"sqlite:///{tmp_path}/shared.sqlite").list_keys()[0].name == "bob"


def test_key_stdin_takes_only_a_key_llmgw_made(url: str) -> None:
    from click.testing import CliRunner

    from llmgw.cli import cli

    bad = CliRunner().invoke(cli, ["keys", "create", "x", "--key-stdin", "--store", url], input="hunter2\n")
    assert bad.exit_code != 0
    given = "sk-llmgw-" + "A" * 43
    good = CliRunner().invoke(cli, ["keys", "create", "x", "--key-stdin", "--json", "--store", url], input=given + "\n")
    assert good.exit_code == 0, good.output
    assert "key" not in json.loads(good.output) and open_store(url).list_keys()[0].hash == hash_key(given)
