"""`catalog validate` (online) and `plan` contact nothing but the endpoint the site
configures (`mirror:` in llmgw.yaml): a catalog naming another URL is refused, and a
listener standing in for that other host records no connection. The same listener as the
site's mirror is contacted, so the test can see a connection when one is made."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.security.test_catalog_hostile import llmgw, make_site


@contextmanager
def listener() -> Iterator[tuple[str, list[bytes]]]:
    """A TCP listener on 127.0.0.1 that records the first bytes of every connection."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    seen.append(conn.recv(4096))
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                except OSError:
                    seen.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join(5)
        srv.close()


def catalog(source: str) -> str:
    return f"""
    models:
      - name: m
        source: {source}
        profiles: [{{name: p, engine: llamacpp}}]
    """


def test_validate_contacts_no_host_the_site_does_not_name(tmp_path: Path) -> None:
    with listener() as (other, seen), listener() as (mirror, _):
        root = make_site(tmp_path, catalog(f"{other}/m.gguf"), config=f"mirror: {mirror}\n")
        proc = llmgw(root, "catalog", "validate")
        assert "Traceback" not in proc.stdout + proc.stderr
        # refused (tests/security/test_weights_ssrf.py), and not asked either
        assert proc.exit_code == 1, proc.stdout + proc.stderr
        assert "is not on the site's endpoint" in proc.stderr
        proc = llmgw(root, "plan")
        assert "Traceback" not in proc.stdout + proc.stderr
    assert seen == [], "validate or plan connected to a host the site does not configure"


def test_validate_does_contact_the_sites_mirror(tmp_path: Path) -> None:
    """The control for the test above: the same listener, named as the mirror, is asked."""
    with listener() as (mirror, seen):
        root = make_site(tmp_path, catalog(f"{mirror}/m.gguf"), config=f"mirror: {mirror}\n")
        proc = llmgw(root, "catalog", "validate")
        assert "Traceback" not in proc.stdout + proc.stderr
    assert any(b"/m.gguf" in s for s in seen), seen
