"""`llmgw -C SITE router serve` mounts the dashboard on its admin listener (a real process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.example_site import example_site
from tests.support.net import free_port
from tests.support.site_copy import ship_site_copy_files


def test_router_serve_with_a_site_serves_the_dashboard(tmp_path: Path) -> None:
    root = example_site(tmp_path, state=False)
    # What cannot be placed and the fabrics come made by apply, beside the site copy: the router
    # never plans, nor parses a fabric.
    ship_site_copy_files(root)
    admin = free_port()
    llmgw = Path(sys.executable).with_name("llmgw")
    proc = subprocess.Popen([str(llmgw), "-C", str(root), "router", "serve", "--listen", f"127.0.0.1:{free_port()}",
                             "--admin-listen", f"127.0.0.1:{admin}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{admin}/", timeout=30)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "the router did not listen within 60 s"
                time.sleep(0.2)
        assert r.status_code == 200 and "<h1>Overview</h1>" in r.text
        assert "llama-4-maverick" in r.text  # not placeable: from placement.json
        fabric = httpx.get(f"http://127.0.0.1:{admin}/fabrics/ib-0c42a10300b20000", timeout=30)
        assert fabric.status_code == 200 and 'class="el cable degraded"' in fabric.text  # from its page file
        css = httpx.get(f"http://127.0.0.1:{admin}/static/style.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        api = httpx.get(f"http://127.0.0.1:{admin}/api/v1/replicas")  # the router's own API is still there
        assert api.status_code == 200 and api.json()["replicas"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
