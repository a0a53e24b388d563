"""The store's password stays out of the router's unit, command lines, Ansible output and
messages; the SQLite store is owner-only.

The unit and secrets file are rendered by Ansible from the role's own templates and
defaults (render_router.yml); router_key.yml runs for real against this host, with a
stand-in `llmgw` that reports what it was given.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llmgw.errors import StoreError
from llmgw.store import open_store, redact_url
from tests.support.ansible import VENV_BIN, ansible_env, playbook

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROLE = REPO / "roles" / "llmgw_router"
# A password with every character the unit, the env file and a shell treat specially.
PASSWORD = 'p@ss$HOME"`x\\y %z\'q'
URL = f"postgresql://llmgw:{PASSWORD}@db.example:5432/llmgw"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("router")
    playbook(HERE / "render_router.yml", {"out_dir": str(out), "llmgw_router_store_url": URL})
    return out


def test_the_unit_carries_no_password(rendered: Path) -> None:
    unit = (rendered / "llmgw-router.service").read_text()
    assert "ss$" not in unit and "db.example" not in unit and "--store" not in unit
    assert "EnvironmentFile=/etc/llmgw-router/router.env" in unit.splitlines()
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing on this machine (Debian package systemd)")
    done = subprocess.run(["systemd-analyze", "verify", str(rendered / "llmgw-router.service")],
                          capture_output=True, text=True, check=False)
    problems = [ln for ln in done.stderr.splitlines() if "llmgw-router.service" in ln and "Command" not in ln]
    assert not problems, done.stderr


def test_the_secrets_file_reads_back_exactly(rendered: Path) -> None:
    # As router_key.yml reads it (systemd's EnvironmentFile= parser unquotes the same way:
    # inside double quotes it unescapes exactly \ " ` $, as a POSIX shell does).
    read = subprocess.run(["sh", "-c", 'set -a; . "$1"; printf %s "$LLMGW_STORE"', "sh", str(rendered / "router.env")],
                          capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", "HOME": "/nowhere"})
    assert read.stdout == URL


def test_the_role_writes_secrets_root_only_and_never_logs_them() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    secrets = next(t for t in tasks if t.get("ansible.builtin.template", {}).get("src") == "router.env.j2")
    assert secrets["no_log"] is True
    assert secrets["ansible.builtin.template"]["mode"] == "0600"
    assert secrets["ansible.builtin.template"]["owner"] == "root"
    folder = next(t for t in tasks if t.get("ansible.builtin.file", {}).get("path") == "{{ llmgw_router_config_dir }}")
    assert folder["ansible.builtin.file"]["mode"] == "0700"
    # Every task that names the store URL hides what it does with it.
    for path in (ROLE / "tasks").glob("*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            if "llmgw_router_store_url" in json.dumps(task):
                assert task.get("no_log") is True, f"{path.name}: {task.get('name')}"


@pytest.fixture
def fake_router_host() -> Iterator[Path]:
    """An install folder with a stand-in llmgw, and the router's secrets file."""
    if os.getuid() != 0:
        pytest.fail("router_key.yml runs `runuser`, which needs root (the tests run as root in CI)")
    root = Path(tempfile.mkdtemp(prefix="llmgw-keyhost-", dir="/tmp"))
    root.chmod(0o755)  # the stand-in runs as `nobody`
    bin_dir = root / "install" / "current" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (root / "install").chmod(0o755)
    fake = bin_dir / "llmgw"
    # What it was given: the store URL as its SHA-256 only (it must not show up in the output).
    fake.write_text('#!/bin/sh\nprintf %s "$LLMGW_STORE" | sha256sum | cut -d" " -f1\nid -un\necho "$*"\n')
    fake.chmod(0o755)
    conf = root / "etc"
    conf.mkdir(mode=0o700)
    env = conf / "router.env"
    env.write_text('LLMGW_STORE="' + "".join("\\" + c if c in '\\"`$' else c for c in URL) + '"\n')
    env.chmod(0o600)
    yield root
    shutil.rmtree(root)


@pytest.mark.root
def test_router_key_never_passes_the_store_url(fake_router_host: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"llmgw_routers": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "llmgw_router_install_dir": str(fake_router_host / "install"),
        "llmgw_router_config_dir": str(fake_router_host / "etc"), "llmgw_router_user": "nobody",
        "llmgw_router_store_url": URL}}}}}}))
    done = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-vvv", "-i", str(inventory),
                           str(REPO / "playbooks" / "router_key.yml"), "-e", "llmgw_key_name=team",
                           "-e", "llmgw_key_group=g1"],
                          capture_output=True, text=True, env=ansible_env(), check=False, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "ss$HOME" not in output and "db.example" not in output
    assert _stdout_of(output).splitlines() == [hashlib.sha256(URL.encode()).hexdigest(), "nobody",
                                               "keys create team --json --group g1"]


def _stdout_of(output: str) -> str:
    """The stand-in's output, from Ansible's verbose result of the task (JSON-escaped in it)."""
    marker = '"stdout": "'
    at = output.index(marker) + len(marker)
    raw, _ = json.JSONDecoder().raw_decode('"' + output[at:])
    assert isinstance(raw, str)
    return raw


def test_the_sqlite_store_is_created_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = open_store(f"sqlite://{tmp_path / 'new' / 'store.sqlite'}")
        store.create_key("k")  # written through the WAL too
    finally:
        os.umask(old)
    for path in (tmp_path / "new").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path.name} is {oct(path.stat().st_mode)}"
    store.close()


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:p@ss@db/x", "postgresql://u:***@db/x"),
    ("postgresql://u:pw@db:5432/x?sslmode=require&password=pw2", "postgresql://u:***@db:5432/x?sslmode=require&password=***"),
    ("postgres://u@db/x", "postgres://u@db/x"),
    ("postgresql://u:pw@[::1]:5432/x", "postgresql://u:***@[::1]:5432/x"),
    ("postgresql://u:pw@[::1/x", "postgresql://***"),
    ("sqlite:///var/lib/llmgw/store.sqlite", "sqlite:///var/lib/llmgw/store.sqlite"),
])
def test_urls_are_redacted_by_parsing(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize("url", [
    "postgresq://u:s3cr3t-pw@db/x",            # a mistyped scheme
    "postgresql://u:s3cr3t-pw@db/x@more",     # an '@' that libpq would split differently
    "postgresql://u:s3cr3t-pw@db:port/x",     # a port that is not a number
    "postgresql://u:s3cr3t-pw@[::1/x",        # an unclosed IPv6 bracket
    "postgresql://u:s3cr3t-pw@127.0.0.1:1/x?password=s3cr3t-pw&bogus=1",
])
def test_store_errors_never_echo_the_password(url: str) -> None:
    with pytest.raises(StoreError) as info:
        open_store(url).close()
    shown = str(info.value.message) + str(info.value.hint or "") + repr(info.value)
    assert "s3cr3t" not in shown, shown
    assert shlex.quote(url) not in shown
