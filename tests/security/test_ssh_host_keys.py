"""SSH checks host keys: a man in the middle on first contact, or one that takes a host's
address later, is handed nothing (the HF token and engine keys travel over these sessions).

A real OpenSSH server on 127.0.0.1 (started here, with a host key of the test's own) stands
in for a fleet host; `llmgw facts` reaches it through Ansible exactly as it would a GPU host.
"Changing the host key" is restarting that sshd with a second key on the same port: what a
reinstalled host, or an attacker answering on its address, looks like to the bastion.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llmgw.inventory import load_inventory
from llmgw.runner import run_playbook
from llmgw.views.tunnel import TunnelError, opened, routes_for
from tests.support.cli import run_cli

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
pytestmark = pytest.mark.skipif(not Path(SSHD).exists() or os.geteuid() != 0,
                                reason="needs sshd (scripts/setup-host installs openssh-server) and root")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    """An sshd on 127.0.0.1:port, restartable with another host key."""

    dir: Path
    port: int
    client_key: Path
    keys: dict[str, str]  # "a" / "b" -> the public host key ("ssh-ed25519 AAAA...")
    proc: subprocess.Popen[bytes] | None = None

    def start(self, which: str) -> None:
        self.stop()
        config = self.dir / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.dir / ('host_' + which)}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "AllowTcpForwarding yes\nPidFile none\nLogLevel ERROR\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # ready when it sends its banner
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    if sock.recv(8).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)  # poll: nothing signals that sshd has bound its port
        raise AssertionError("sshd did not start")

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, 15)  # its session children too: no connection outlives the key
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def sshd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sshd]:
    folder = tmp_path / "sshd"
    folder.mkdir()
    keys = {w: _keygen(folder / f"host_{w}") for w in ("a", "b")}
    client = folder / "client"
    (folder / "authorized_keys").write_text(_keygen(client) + "\n")
    # A fresh connection per run: Ansible's ControlPersist master would otherwise carry a
    # session opened against the old key across the key change.
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ControlMaster=no")
    server = Sshd(folder, _free_port(), client, keys)
    try:
        yield server
    finally:
        server.stop()


def make_site(tmp_path: Path, sshd: Sshd) -> Path:
    root = tmp_path / "site"
    (root / "catalog").mkdir(parents=True)
    (root / "inventory").mkdir()
    (root / "llmgw.yaml").write_text("")
    (root / "inventory" / "hosts.yml").write_text(
        "all:\n  children:\n    llmgw_nodes:\n      hosts:\n        node1:\n"
        f"          ansible_host: 127.0.0.1\n          ansible_port: {sshd.port}\n          ansible_user: root\n"
        f"          ansible_ssh_private_key_file: {sshd.client_key}\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
        "    llmgw_routers:\n      hosts:\n        node1:\n")
    return root


def recorded(root: Path) -> list[str]:
    path = root / "known_hosts"
    return [" ".join(ln.split()[1:3]) for ln in path.read_text().splitlines()] if path.is_file() else []


def test_facts_records_the_key_on_first_contact_and_refuses_a_changed_one(tmp_path: Path, sshd: Sshd) -> None:
    root = make_site(tmp_path, sshd)
    sshd.start("a")
    first = run_cli("-C", str(root), "facts")
    assert first.exit_code == 0, first.stdout + first.stderr
    assert recorded(root) == [sshd.keys["a"]], "the first contact did not record the host's key in the site"
    assert (root / "known_hosts").read_text().startswith(f"[127.0.0.1]:{sshd.port} ")  # readable, not hashed

    sshd.start("b")  # the same address answers with another key
    changed = run_cli("-C", str(root), "facts")
    out = changed.stdout + changed.stderr
    assert changed.exit_code == 1, out
    assert "SSH host key of node1 changed" in out and "--accept-new-key node1" in out, out
    assert recorded(root) == [sshd.keys["a"]], "the changed key replaced the recorded one"

    accepted = run_cli("-C", str(root), "facts", "--accept-new-key", "node1")
    assert accepted.exit_code == 0, accepted.stdout + accepted.stderr
    assert recorded(root) == [sshd.keys["b"]]


def test_every_other_run_refuses_a_host_it_has_no_key_for(tmp_path: Path, sshd: Sshd) -> None:
    """Only `facts` trusts on first use: a playbook run (apply, logs, weights) to a host missing
    from the site's known hosts connects to nothing."""
    root = make_site(tmp_path, sshd)
    sshd.start("a")
    marker = tmp_path / "reached"
    playbook = tmp_path / "touch.yml"
    playbook.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Touch\n"
                        f"      ansible.builtin.file: {{path: {marker}, state: touch, mode: '0600'}}\n")
    run = run_playbook(playbook, root / "inventory" / "hosts.yml", forks=1)
    assert not marker.exists(), "the playbook ran on a host whose key nobody checked"
    assert "SSH host key of node1 is not in" in run.host_errors.get("node1", ""), run.host_errors

    (root / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {sshd.keys['b']}\n")  # pinned: another key
    run = run_playbook(playbook, root / "inventory" / "hosts.yml", forks=1)
    assert not marker.exists()
    assert "SSH host key of node1 changed" in run.host_errors.get("node1", ""), run.host_errors
    assert run.key_changed == ("node1",)

    (root / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {sshd.keys['a']}\n")  # the control: the right key
    assert run_playbook(playbook, root / "inventory" / "hosts.yml", forks=1).ok
    assert marker.exists()


class _Admin(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"replicas": []}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_tunnel_to_a_router_checks_its_key_against_the_site(tmp_path: Path, sshd: Sshd) -> None:
    root = make_site(tmp_path, sshd)
    admin = ThreadingHTTPServer(("127.0.0.1", 0), _Admin)
    threading.Thread(target=admin.serve_forever, daemon=True).start()
    try:
        inv = root / "inventory" / "hosts.yml"
        inv.write_text(inv.read_text().replace("    llmgw_routers:\n      hosts:\n        node1:\n",
                                               "    llmgw_routers:\n      hosts:\n        node1:\n"
                                               "          llmgw_router_admin_listen: "
                                               f"127.0.0.1:{admin.server_address[1]}\n"))
        sshd.start("b")
        routers = load_inventory(inv).routers
        [route] = routes_for([routers["node1"]], root / "known_hosts")
        assert not isinstance(route, tuple), route
        with pytest.raises(TunnelError, match="SSH host key of node1 is not in"), opened(route, timeout=15):
            pass  # first contact: a tunnel trusts no key it has not been given
        (root / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {sshd.keys['a']}\n")
        with pytest.raises(TunnelError, match="SSH host key of node1 changed"), opened(route, timeout=15):
            pass
        (root / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {sshd.keys['b']}\n")  # the control
        with opened(route, timeout=15) as base:
            import httpx
            assert httpx.get(f"{base}/api/v1/replicas", timeout=5).json() == {"replicas": []}
    finally:
        admin.shutdown()
        admin.server_close()

