"""Secrets stay out of command lines and out of children's environments.

A command line is readable by every local user (`ps`, /proc/PID/cmdline), so a store URL
with its password is refused there; the password comes from a file (or libpq's ~/.pgpass).
The programs llmgw starts (ansible, ssh, git, pip, podman) need none of llmgw's secrets,
and a child's environment is readable by its user's other processes and is written into
ansible-runner's artifacts: they get llmgw.childenv's environment, without them.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from llmgw.inventory import Host
from llmgw.runner import run_playbook
from llmgw.state.backend import git_commit
from llmgw.views.tunnel import TunnelError, admin_route, opened
from tests.support.cli import run_cli

# Every secret variable llmgw reads, each with a value a test can look for.
SECRETS = {
    "HF_TOKEN": "hf_secret_token_1",
    "LLMGW_STATE_PASSWORD": "state_secret_2",
    "LLMGW_ENGINE_KEY_SECRET": "engine_secret_3",
    "LLMGW_STORE": "postgresql://u:store_secret_4@db/x",
    "PGPASSWORD": "pg_secret_5",
    "LLMGW_API_KEY": "sk-llmgw-secret_6",
}
OPERATOR = {"LLMGW_TEST_OPERATOR_SETTING": "visible"}  # the operator's own settings still arrive


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {**SECRETS, **OPERATOR}.items():
        monkeypatch.setenv(k, v)


def leaked(text: str) -> list[str]:
    return [k for k, v in SECRETS.items() if v in text]


def test_a_store_password_on_the_command_line_is_refused(tmp_path: Path) -> None:
    r = run_cli("-C", str(tmp_path), "keys", "list", "--store", "postgresql://llmgw:s3cr3t-pw@127.0.0.1:9/db")
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "--store-password-file" in r.stderr and "s3cr3t-pw" not in r.stdout + r.stderr


def test_the_help_suggests_no_password_in_the_url() -> None:
    r = run_cli("keys", "list", "--help")
    assert r.exit_code == 0
    assert "USER:PASS" not in r.stdout and "--store-password-file" in r.stdout


def test_the_store_password_comes_from_a_file(tmp_path: Path, pg_url: str) -> None:
    """The real PostgreSQL of the store tests: the URL without its password, the password in a file."""
    parts = urlsplit(pg_url)
    assert parts.password, "the test database's URL has a password to take out"
    bare = urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))
    pw_file = tmp_path / "store.password"
    pw_file.write_text(parts.password + "\n")
    pw_file.chmod(0o600)
    made = run_cli("-C", str(tmp_path), "keys", "create", "alice", "--store", bare, "--store-password-file",
                   str(pw_file), "--json")
    assert made.exit_code == 0, made.stdout + made.stderr
    listed = run_cli("-C", str(tmp_path), "keys", "list", "--store", bare, "--store-password-file", str(pw_file),
                     "--json")
    assert listed.exit_code == 0 and '"alice"' in listed.stdout, listed.stdout + listed.stderr
    # (the test database's password is also its user's name: look for it where a URL shows one)
    assert f":{parts.password}@" not in made.stdout + made.stderr + listed.stdout + listed.stderr


def test_ansible_inherits_no_secret(tmp_path: Path, secret_env: None) -> None:
    """The real ansible-playbook, asked for its own environment (a lookup runs on the control host)."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    names = [*SECRETS, *OPERATOR]
    playbook = tmp_path / "env.yml"
    playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Environment\n"
                        "      ansible.builtin.debug:\n        msg: \"" +
                        "|".join(f"{n}={{{{ lookup('env', '{n}') }}}}" for n in names) + "\"\n")
    run = run_playbook(playbook, inventory, forks=1, capture=["Environment"])
    assert run.ok, run.host_errors
    msg = run.results["localhost"]["Environment"].result["msg"]
    assert "LLMGW_TEST_OPERATOR_SETTING=visible" in msg, msg
    assert leaked(msg) == [], f"ansible-playbook inherited {leaked(msg)}"


def test_an_ssh_tunnel_inherits_no_secret(tmp_path: Path, secret_env: None) -> None:
    """The ssh llmgw starts for a router's admin API: a stand-in `ssh` writes the environment it got."""
    seen = tmp_path / "ssh.env"
    exe = tmp_path / "ssh"
    exe.write_text(f"#!{sys.executable}\nimport os\nopen({str(seen)!r}, 'w').write(repr(dict(os.environ)))\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    route = admin_route(Host("r1", frozenset({"llmgw_routers"}), vars={"ansible_ssh_executable": str(exe)}))
    with pytest.raises(TunnelError), opened(route, timeout=5, attempts=1):
        pass
    text = seen.read_text()
    assert "LLMGW_TEST_OPERATOR_SETTING" in text
    assert leaked(text) == [], f"ssh inherited {leaked(text)}"


def test_git_inherits_no_secret(tmp_path: Path, secret_env: None) -> None:
    """The git llmgw runs in a site folder (the state records the commit): a repository's own
    fsmonitor hook, which git runs when it refreshes the index, writes the environment it got."""
    repo = tmp_path / "site"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "llmgw.yaml").write_text("")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    seen = tmp_path / "git.env"
    hook = tmp_path / "fsmonitor"
    hook.write_text(f"#!{sys.executable}\nimport os\nopen({str(seen)!r}, 'w').write(repr(dict(os.environ)))\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", str(hook)], check=True)
    assert git_commit(repo)
    text = seen.read_text()
    assert "LLMGW_TEST_OPERATOR_SETTING" in text
    assert leaked(text) == [], f"git inherited {leaked(text)}"

