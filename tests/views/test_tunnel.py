"""Live views from the bastion (#19): the SSH route to each router's admin API, built from the
inventory as Ansible would connect, and routers asked at once, each bounded in time.

A stand-in `ssh` (a Python script named by `ansible_ssh_executable`, as an operator could
name any ssh) does the `-L` forwarding, so the tunnel's whole life (start, wait until the
local port answers, request, close) runs for real without an sshd; the lab test
(test_views_lab.py) does the same through real ssh to a real router.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from llmgw.inventory import Host
from llmgw.views.ask_routers import fetch_runtime
from llmgw.views.tunnel import AdminRoute, TunnelError, admin_route, opened, routes_for, tunnel_argv

FAKE_SSH = r'''#!PYTHON
"""Forwards -L 127.0.0.1:LPORT:HOST:PORT like `ssh -N -L`; destination down.invalid fails as ssh does."""
import os, socket, sys, threading
args = sys.argv[1:]
with open(os.environ["FAKE_SSH_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
dest = args[-1]
if dest == "down.invalid":
    sys.stderr.write("ssh: Could not resolve hostname down.invalid: Name or service not known\n")
    sys.exit(255)
_, lport, host, port = args[args.index("-L") + 1].split(":")
srv = socket.create_server(("127.0.0.1", int(lport)))
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
while True:
    c, _ = srv.accept()
    try:
        u = socket.create_connection((host, int(port)))
    except OSError:
        c.close(); continue
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
'''


class Admin(BaseHTTPRequestHandler):
    replicas: ClassVar[list[dict[str, Any]]] = []
    delay = 0.0
    # Set: answer once every router sharing `meet` has been asked (at most `delay` s), noting
    # in `met` whether they all were; asked one after another, the first waits in vain.
    meet: ClassVar[threading.Barrier | None] = None
    met: ClassVar[list[bool]] = []

    def do_GET(self) -> None:
        if self.meet is None:
            time.sleep(self.delay)  # a slow router
        else:
            try:
                self.meet.wait(self.delay)
                self.met.append(True)
            except threading.BrokenBarrierError:
                self.met.append(False)
        body = json.dumps({"replicas": self.replicas}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve(replicas: list[dict[str, Any]], delay: float = 0.0, meet: threading.Barrier | None = None,
          met: list[bool] | None = None) -> Iterator[int]:
    handler = type("H", (Admin,), {"replicas": replicas, "delay": delay, "meet": meet, "met": met})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield int(srv.server_address[1])
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "fake-ssh"
    exe.write_text(FAKE_SSH.replace("PYTHON", sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_SSH_LOG", str(tmp_path / "ssh.log"))
    return exe


def host(name: str, **hv: Any) -> Host:
    return Host(name=name, groups=frozenset({"llmgw_routers"}), vars=hv)


def test_the_route_is_ansibles_connection() -> None:
    route = admin_route(host("r1", ansible_host="10.0.0.5", ansible_user="ops", ansible_port=2222,
                             ansible_ssh_private_key_file="~/.ssh/fleet",
                             ansible_ssh_common_args="-o ProxyJump=jump@bastion -o UserKnownHostsFile=/k",
                             ansible_ssh_extra_args="-o Compression=yes",
                             llmgw_router_admin_listen="127.0.0.1:9001"), known_hosts=Path("/site/known_hosts"))
    argv = tunnel_argv(route, 40000)
    assert argv[0] == "ssh" and argv[-2:] == ["--", "10.0.0.5"]
    assert "-L" in argv and argv[argv.index("-L") + 1] == "127.0.0.1:40000:127.0.0.1:9001"
    joined = " ".join(argv)
    for part in ("-o User=ops", "-o Port=2222", f"-i {os.path.expanduser('~/.ssh/fleet')}",
                 "-o ProxyJump=jump@bastion", "-o Compression=yes", "-o ExitOnForwardFailure=yes",
                 "-o BatchMode=yes", "-N"):
        assert part in joined, part
    # Host keys checked strictly against the site's file, as llmgw.runner runs Ansible, placed
    # before the inventory's options (ssh keeps an option's first value).
    assert argv.index("StrictHostKeyChecking=yes") < argv.index("UserKnownHostsFile=/k")
    assert argv.index("UserKnownHostsFile=/site/known_hosts") < argv.index("UserKnownHostsFile=/k")
    plain = tunnel_argv(admin_route(host("r1")), 1)
    assert "StrictHostKeyChecking=yes" in plain and plain[-1] == "r1"  # no ansible_host: the name
    wild = admin_route(host("r1", llmgw_router_admin_listen="0.0.0.0:8001"))
    assert (wild.admin_host, wild.admin_port) == ("127.0.0.1", 8001)
    local = admin_route(host("r1", ansible_connection="local"))
    assert local.ssh is None and local.direct_url == "http://127.0.0.1:8001"


@pytest.mark.parametrize(("hv", "says"), [
    ({"ansible_ssh_private_key_file": "{{ playbook_dir }}/key"}, "ansible_ssh_private_key_file is a template"),
    ({"ansible_connection": "community.docker.docker"}, "over ssh only"),
    ({"ansible_port": "twenty-two"}, "not a port number"),
    ({"llmgw_router_admin_listen": "8001"}, "is not HOST:PORT"),
    ({"ansible_host": "-oProxyCommand=x"}, "starts with '-'"),
    ({"ansible_ssh_common_args": "-o 'unclosed"}, "does not split"),
])
def test_vars_llmgw_cannot_use_name_the_variable(hv: dict[str, Any], says: str) -> None:
    with pytest.raises(TunnelError, match=says):
        admin_route(host("r1", **hv))
    [(name, why)] = routes_for([host("r1", **hv)], None)  # type: ignore[misc]
    assert name == "r1" and says.split()[0] in why


def test_a_tunnel_lives_only_while_it_is_used(fake_ssh: Path, tmp_path: Path) -> None:
    for port in serve([{"id": "m-1", "in_flight": 2}]):
        route = admin_route(host("r1", ansible_ssh_executable=str(fake_ssh), ansible_host="127.0.0.1",
                                 llmgw_router_admin_listen=f"127.0.0.1:{port}"))
        with opened(route) as base:
            import httpx
            assert httpx.get(f"{base}/api/v1/replicas", timeout=5).json()["replicas"][0]["in_flight"] == 2
            local = int(base.rsplit(":", 1)[1])
        # Closed: nothing listens on the bastion after the call.
        import socket
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", local), timeout=1):
            pass
    assert "-L 127.0.0.1:" in (tmp_path / "ssh.log").read_text()


def test_one_router_down_is_not_known_never_idle_and_routers_are_asked_at_once(fake_ssh: Path) -> None:
    reps = [{"id": "m-1", "in_flight": 1, "requests": 3, "last_used": "2026-11-30T07:00:00+00:00",
             "idle_seconds": 5.0, "health": "healthy"}]
    # Routers a and b answer only once both were asked: the event itself, not a stopwatch.
    meet, met = threading.Barrier(2), []
    for slow_a in serve(reps, delay=4.5, meet=meet, met=met):
        for slow_b in serve(reps, delay=4.5, meet=meet, met=met):
            routes: list[AdminRoute | tuple[str, str]] = [
                admin_route(host(n, ansible_ssh_executable=str(fake_ssh), ansible_host="127.0.0.1",
                                 llmgw_router_admin_listen=f"127.0.0.1:{p}"))
                for n, p in (("a", slow_a), ("b", slow_b))]
            routes.append(admin_route(host("c", ansible_ssh_executable=str(fake_ssh), ansible_host="down.invalid")))
            routes.append(("d", "ansible_connection is 'winrm'"))
            rt = fetch_runtime(routes, timeout=5)
    assert rt.routers == ("a", "b") and rt.missing == ("c", "d") and not rt.complete
    assert rt.replicas["m-1"]["in_flight"] == 2
    assert any(p.startswith("router c is not known") and "Could not resolve hostname" in p for p in rt.problems)
    assert any(p.startswith("router d is not known") for p in rt.problems)
    assert met == [True, True], f"routers a and b were not asked at once: {met}"


def test_a_router_that_never_answers_is_bounded(fake_ssh: Path, tmp_path: Path) -> None:
    silent = tmp_path / "silent-ssh"  # authenticates forever: the tunnel never comes up
    silent.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    silent.chmod(0o755)
    route = admin_route(host("r1", ansible_ssh_executable=str(silent)))
    t0 = time.monotonic()
    rt = fetch_runtime([route], tunnel_timeout=1.0)
    assert time.monotonic() - t0 < 8 and rt.missing == ("r1",) and not rt.known
    assert "opened no tunnel within 1 s" in rt.problems[0]
