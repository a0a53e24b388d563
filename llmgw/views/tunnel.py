"""Reaching a router's admin API from the bastion: an SSH tunnel, opened and closed per call.

The admin listener stays on loopback of the router host (`llmgw_router_admin_listen`,
default 127.0.0.1:8001). The views reach it the way Ansible reaches that host: the same
`ssh`, user, port, key, `ansible_ssh_common_args`/`ansible_ssh_extra_args` (where
ProxyJump/ProxyCommand live) and the same host key checking as llmgw.runner: strict,
against the site's known-hosts file, whatever the environment says. The tunnel is
`ssh -N -L 127.0.0.1:LOCAL:ADMIN` with ExitOnForwardFailure, kept open only while one
request runs, then closed: nothing listens on the bastion longer than a view takes.

Host vars are the inventory's; a value llmgw cannot use as Ansible would (a Jinja
template, a connection other than ssh or local) is a `TunnelError` naming the variable,
and the view shows that router as not known.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw.childenv import child_env
from llmgw.inventory import Host
from llmgw.known_hosts import host_key_args, host_key_problem

DEFAULT_ADMIN_LISTEN = "127.0.0.1:8001"  # roles/llmgw_router's llmgw_router_admin_listen
CONNECT_TIMEOUT_S = 5
# Ansible's own choice when it knows no password: keys only, never a prompt.
_BATCH = ["-o", "BatchMode=yes", "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no"]


class TunnelError(Exception):
    """Why a router's admin API could not be reached through SSH (one line, for a view's note)."""


@dataclass(frozen=True)
class AdminRoute:
    """How to reach one router's admin API: directly (`ssh` None) or through `ssh ... -L`."""

    router: str  # the inventory name
    admin_host: str  # the admin listener's address as seen on the router host
    admin_port: int
    ssh: tuple[str, ...] | None = None  # argv up to the destination, without -N/-L
    destination: str = ""
    notes: tuple[str, ...] = field(default=())
    known_hosts: Path | None = None  # the site's, checked strictly (llmgw.known_hosts)

    @property
    def direct_url(self) -> str:
        host = f"[{self.admin_host}]" if ":" in self.admin_host else self.admin_host
        return f"http://{host}:{self.admin_port}"


def _var(hv: Mapping[str, Any], *names: str) -> tuple[str, Any] | None:
    for n in names:
        if hv.get(n) not in (None, ""):
            value = hv[n]
            if isinstance(value, str) and ("{{" in value or "{%" in value):
                raise TunnelError(f"host var {n} is a template ({value!r}), which llmgw does not render; "
                                  "give the value itself, or pass --router URL")
            return n, value
    return None


def split_admin_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) of the admin listener; a wildcard address means loopback."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise TunnelError(f"llmgw_router_admin_listen {text!r} is not HOST:PORT")
    if host in ("0.0.0.0", "::", "*"):
        host = "127.0.0.1"
    return host, int(port)


def admin_route(host: Host, *, known_hosts: Path | None = None) -> AdminRoute:
    """The route to `host`'s admin listener from its inventory vars, as Ansible would connect,
    checking its host key against `known_hosts` (the site's; None: ssh's own files)."""
    hv = host.vars
    listen = _var(hv, "llmgw_router_admin_listen")
    admin_host, admin_port = split_admin_listen(str(listen[1]) if listen else DEFAULT_ADMIN_LISTEN)
    conn = _var(hv, "ansible_connection")
    kind = str(conn[1]) if conn else "ssh"
    if kind == "local":
        return AdminRoute(host.name, admin_host, admin_port)
    if kind not in ("ssh", "smart", "paramiko", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh"):
        raise TunnelError(f"ansible_connection is {kind!r}: llmgw opens tunnels over ssh only; "
                          "pass --router URL for this router")
    exe = _var(hv, "ansible_ssh_executable")
    argv: list[str] = [str(exe[1]) if exe else "ssh"]
    ssh_args = _var(hv, "ansible_ssh_args")  # replaces Ansible's defaults (ControlMaster...), not needed here
    if ssh_args:
        argv += shlex.split(str(ssh_args[1]))
    argv += host_key_args(known_hosts)  # before the inventory's options: ssh keeps an option's first value
    argv += _BATCH
    port = _var(hv, "ansible_port", "ansible_ssh_port")
    if port:
        if not str(port[1]).isdigit():
            raise TunnelError(f"host var {port[0]} is {port[1]!r}, not a port number")
        argv += ["-o", f"Port={int(port[1])}"]
    key = _var(hv, "ansible_ssh_private_key_file", "ansible_private_key_file")
    if key:
        argv += ["-i", os.path.expanduser(str(key[1]))]
    user = _var(hv, "ansible_user", "ansible_ssh_user", "ansible_remote_user")
    if user:
        argv += ["-o", f"User={user[1]}"]
    argv += ["-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
    for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        extra = _var(hv, name)
        if extra:
            try:
                argv += shlex.split(str(extra[1]))
            except ValueError as exc:
                raise TunnelError(f"host var {name} does not split into arguments: {exc}") from None
    address = _var(hv, "ansible_host", "ansible_ssh_host")
    destination = str(address[1]) if address else host.name
    if destination.startswith("-"):
        raise TunnelError(f"the address {destination!r} starts with '-'")
    return AdminRoute(host.name, admin_host, admin_port, ssh=tuple(argv), destination=destination,
                      known_hosts=known_hosts)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def tunnel_argv(route: AdminRoute, local_port: int) -> list[str]:
    assert route.ssh is not None
    admin = f"[{route.admin_host}]" if ":" in route.admin_host else route.admin_host
    return [*route.ssh, "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ClearAllForwardings=no",
            "-L", f"127.0.0.1:{local_port}:{admin}:{route.admin_port}", "--", route.destination]


@contextmanager
def opened(route: AdminRoute, *, timeout: float = 10.0, attempts: int = 3) -> Iterator[str]:
    """The admin API's base URL, through a tunnel while the block runs (or directly)."""
    if route.ssh is None:
        yield route.direct_url
        return
    deadline = time.monotonic() + timeout
    last = ""
    for _ in range(attempts):
        port = _free_port()
        proc = subprocess.Popen(tunnel_argv(route, port), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                                env=child_env())
        try:
            while proc.poll() is None and not _answers(port) and time.monotonic() < deadline:
                time.sleep(0.05)  # poll: the listener appears once ssh has authenticated
            if proc.poll() is None and _answers(port):
                yield f"http://127.0.0.1:{port}"
                return
            if proc.poll() is None:
                raise TunnelError(f"ssh to {route.destination} opened no tunnel within {timeout:.0f} s")
            err = [ln for ln in (proc.stderr.read() if proc.stderr else "").splitlines()
                   if ln.strip() and not ln.startswith("Warning: Permanently added")]
            last = err[-1] if err else f"ssh exited {proc.returncode}"
            refused = host_key_problem(route.router, {"stderr": "\n".join(err)}, route.known_hosts)
            if refused is not None:
                last = refused[1]
                break
            if "forward" not in last.lower() or time.monotonic() >= deadline:
                break  # a port taken between choosing and binding is worth another try; nothing else
        finally:
            _close(proc)
    raise TunnelError(f"ssh to {route.destination} failed: {last}")


def _close(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def routes_for(routers: Sequence[Host], known_hosts: Path | None) -> list[AdminRoute | tuple[str, str]]:
    """A route per router, or (router, why not) for one whose vars llmgw cannot use."""
    out: list[AdminRoute | tuple[str, str]] = []
    for h in routers:
        try:
            out.append(admin_route(h, known_hosts=known_hosts))
        except TunnelError as exc:
            out.append((h.name, str(exc)))
    return out
