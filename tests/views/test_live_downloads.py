"""Download progress on the dashboard while apply fetches (#19): apply's feed works out rate
and ETA per host and replica and posts them to the router's dashboard, which shows them on
the overview and replicas pages until apply is done."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.apply.admin_token import admin_token
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.inventory import Host
from llmgw.router.admin_guard import ADMIN_TOKEN_FILE
from llmgw.site import Site
from llmgw.views.download_board import FORGET_AFTER_S, DownloadBoard
from llmgw.views.live_downloads import DownloadFeed
from llmgw.views.tunnel import admin_route
from tests.support.example_site import example_site
from tests.support.net import free_port

NAME = "bbc40e7b720952e6-qwen2.5-coder-14b-instruct-q4_k_m.gguf"  # the example's starting replica's entry
GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_and_eta_from_the_readings() -> None:
    clock = Clock()
    feed = DownloadFeed(lambda: [], lambda host, name: ["m-1"] if host == "a" else [], clock=clock)
    feed.reading("a", "w.gguf", 0, 10 * GIB)
    [first] = feed.snapshot()
    assert first["rate"] is None and first["eta_seconds"] is None  # one reading: no rate yet
    for _ in range(10):
        clock.now += 2
        feed.reading("a", "w.gguf", first["bytes"] + int((clock.now - 1000) * 100 * 2**20), 10 * GIB)
    [d] = feed.snapshot()
    assert d["rate"] == pytest.approx(100 * 2**20) and d["replicas"] == ["m-1"]
    assert d["eta_seconds"] == pytest.approx((10 * GIB - d["bytes"]) / (100 * 2**20), rel=1e-3)
    feed.reading("b", "w.gguf", 5, None)  # size not known: no ETA, never a made-up one
    assert [x["eta_seconds"] for x in feed.snapshot()] == [d["eta_seconds"], None]
    feed.reading("a", "w.gguf", 10 * GIB, 10 * GIB)  # finished: no longer listed
    assert [x["host"] for x in feed.snapshot()] == ["b"]


def test_the_board_checks_what_it_is_sent_and_forgets_a_silent_apply() -> None:
    clock = Clock()
    board = DownloadBoard(clock)
    row = {"host": "a", "name": "w", "bytes": 1, "total": 2, "rate": 1.0, "eta_seconds": 1.0, "replicas": ["m-1"]}
    board.post({"downloads": [row]})
    assert board.by_node() == {("a", "w"): row}
    for bad in ({"downloads": [{**row, "bytes": -1}]}, {"downloads": [{**row, "host": ""}]},
                {"downloads": [{**row, "replicas": [3]}]}, {"downloads": "x"}, [row]):
        with pytest.raises(ValueError):
            board.post(bad)
    assert board.by_node() == {("a", "w"): row}  # a bad post changes nothing
    clock.now += FORGET_AFTER_S + 1
    assert board.current()["downloads"] == []


@pytest.fixture
def router(tmp_path: Path) -> Iterator[int]:
    """`llmgw router serve` with the example site (so its admin listener has the dashboard),
    and the admin token beside its state, as the role writes it."""
    root = example_site(tmp_path)
    state_file = Site.load(root).state_file
    state_file.with_name(ADMIN_TOKEN_FILE).write_text(admin_token(EngineKeyring.beside(state_file)) + "\n")
    admin = free_port()
    llmgw = Path(sys.executable).with_name("llmgw")
    # One process: the dashboard is the admin listener's, served alike by a lone router and by
    # the supervisor of several workers, which would only add interpreters to start.
    proc = subprocess.Popen([str(llmgw), "-C", str(root), "router", "serve", "--listen", f"127.0.0.1:{free_port()}",
                             "--admin-listen", f"127.0.0.1:{admin}", "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{admin}/api/v1/downloads", timeout=30).raise_for_status()
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "the router did not listen within 60 s"
                time.sleep(0.2)
        yield admin
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_apply_feed_reaches_the_dashboard_until_apply_is_done(router: int, tmp_path: Path) -> None:
    route = admin_route(Host("router-1", frozenset({"llmgw_routers"}),
                             vars={"ansible_connection": "local", "llmgw_router_admin_listen": f"127.0.0.1:{router}"}))
    base = f"http://127.0.0.1:{router}"
    clock = Clock()
    keyring = EngineKeyring.beside(Site.load(tmp_path / "example").state_file)  # what apply derives it from
    feed = DownloadFeed(lambda: [route], lambda host, name: ["qwen2.5-coder-14b-1"], clock=clock, every=0.1,
                        token=lambda: admin_token(keyring))
    feed.reading("l40s-01", NAME, 1 * GIB, 9 * GIB)
    clock.now += 16
    feed.reading("l40s-01", NAME, 3 * GIB, 9 * GIB)  # 128 MiB/s, 6 GiB left: 48 s

    deadline = time.monotonic() + 30
    while not (listed := httpx.get(f"{base}/api/v1/downloads").json()["downloads"]) or listed[0]["bytes"] < 3 * GIB:
        assert time.monotonic() < deadline, "the feed's post never reached the router"
        time.sleep(0.1)
    assert listed == [{"host": "l40s-01", "name": NAME, "bytes": 3 * GIB, "total": 9 * GIB, "rate": 128 * 2**20,
                       "eta_seconds": 48.0, "replicas": ["qwen2.5-coder-14b-1"]}]
    overview = httpx.get(f"{base}/", timeout=120).text
    assert "Downloads in progress" in overview and f'data-download="l40s-01/{NAME}"' in overview
    assert "128 MiB/s" in overview and ">48s<" in overview
    replicas = httpx.get(f"{base}/replicas", timeout=120).text  # under its replica, with rate and time left
    assert "downloading on l40s-01: 3.0 GiB of 9.0 GiB (33%), 128 MiB/s, 48s left" in replicas
    bad = httpx.post(f"{base}/api/v1/downloads", content=b"{not json",
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {admin_token(keyring)}"})
    assert bad.status_code == 400

    feed.close()
    assert httpx.get(f"{base}/api/v1/downloads").json()["downloads"] == []
    assert "Downloads in progress" not in httpx.get(f"{base}/", timeout=120).text and feed.posts >= 2


def test_a_router_that_does_not_answer_is_asked_less_and_less_and_named_once() -> None:
    said: list[str] = []
    closed = f"127.0.0.1:{free_port()}"
    route = admin_route(Host("router-1", frozenset({"llmgw_routers"}),
                             vars={"ansible_connection": "local", "llmgw_router_admin_listen": closed}))
    feed = DownloadFeed(lambda: [route], lambda host, name: [], say=said.append, every=0.05)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.6:  # apply's readings keep coming (a first apply: no router runs yet)
        feed.reading("a", "w", int((time.monotonic() - t0) * 1000), 10_000)
        time.sleep(0.05)
    feed.close()
    # Backing off 0.05, 0.1, 0.2, 0.4, 0.8 s: about 5 tries, not the 32 periods (and a last one at close).
    assert 2 <= feed.failures <= 8, feed.failures
    assert len(said) == 1 and said[0].startswith("router router-1's dashboard does not show download progress")
