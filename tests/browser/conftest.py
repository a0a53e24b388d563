"""Browser test fixtures: the real router (its admin listener serving the dashboard) on
loopback over a copy of the example site, and Debian's chromium driven by playwright.

Replica endpoints in the copied state are rewritten to loopback: a tiny `/health` server
for all but one replica, a closed port for that one (so an unhealthy replica and its
error show), and no packet ever leaves 127.0.0.0/8.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, sync_playwright

from llmgw.router import RouterServer, RouterSettings
from llmgw.site import Site
from llmgw.state import read_state, write_state
from llmgw.store import open_store
from llmgw.store.model import UsageDelta
from tests.support.example_site import REPO, example_site
from tests.support.net import free_port
from tests.support.router import serve_in_thread
from tests.support.site_copy import ship_site_copy_files
from tests.views.test_routes_view import ROUTE

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
UNHEALTHY = "llama-3.1-70b-2"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"status":"ok"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Dashboard:
    url: str
    site: Path
    server: RouterServer


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    root = example_site(tmp_path_factory.mktemp("dashboard"))
    health = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=health.serve_forever, daemon=True).start()
    closed = free_port()
    site = Site.load(root)
    state = read_state(site.state_file)
    # An endpoint is its rank-0 shard's address and port (the state is checked on load): both move.
    replicas = [r.model_copy(update={"endpoint": f"http://127.0.0.1:{port}",
                                     "shards": [sh.model_copy(update={"port": port}) if sh.rank == 0 else sh
                                                for sh in r.shards]})
                for r in state.replicas for port in [closed if r.id == UNHEALTHY else health.server_port]]
    write_state(site.state_file, state.model_copy(update={"replicas": replicas}))
    # A weighted route (docs/routes.md), which the Models page lists under the models.
    (root / "catalog" / "routes.yaml").write_text(ROUTE)
    # What cannot be placed and the fabrics, made on the bastion as apply makes them for the routers' site copy.
    ship_site_copy_files(root)

    store = open_store(f"sqlite:///{root / 'store.sqlite'}")
    store.set_group("research", rpm=600, tokens_per_day=5_000_000)
    store.set_group("nlp", parent="research", tokens_per_day=1_000_000)
    alice, _ = store.create_key("alice", "nlp")
    bob, _ = store.create_key("bob <script>", "research")
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    store.add_usage([UsageDelta(alice.id, today, "llama-3.1-70b", 12, 3400, 5100),
                     UsageDelta(bob.id, today, "deepseek-v3", 3, 900, 1200)], [])
    server = RouterServer(state_path=site.state_file, store=store, listen=("127.0.0.1", 0),
                          admin_listen=("127.0.0.1", 0), site_dir=root, graceful_timeout=2,
                          settings=RouterSettings(health_interval=0.3, health_timeout=1.0, state_poll_interval=0.2,
                                                  backoff_base=0.5, backoff_max=1.0))
    thread, _errors = serve_in_thread(server)
    host, port = server.addresses["admin"]
    try:
        yield Dashboard(f"http://{host}:{port}", root, server)
    finally:
        server.stop()
        thread.join(15)
        health.shutdown()
        health.server_close()
        store.close()


# Module scope, not session: Playwright's sync API keeps an event loop running in the main
# thread while it is open, which would break every later test that calls asyncio.run().
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup-host (or apt-get install -y chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def console_problems() -> list[str]:
    """Page errors and console errors/warnings; a test that expects one (a 404) clears it."""
    return []


@pytest.fixture
def page(browser: Browser, console_problems: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
    context.set_default_navigation_timeout(60_000)  # a first page loads the site (ansible-inventory, plan)
    pg = context.new_page()
    problems = console_problems
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    pg.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
          if msg.type in ("error", "warning") else None)
    try:
        yield pg
    finally:
        context.close()
    assert not problems, problems


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def tooltips(elements: Locator) -> list[str]:
    """Each element's tooltip as the fabric page makes it, on a first hover: the mouse over
    the element itself (a cable) or its shape (an adapter's rect)."""
    result: list[str] = elements.evaluate_all(
        "els => els.map(e => { const target = e.querySelector('rect') || e;"
        " target.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));"
        " return e.querySelector('title').textContent; })")
    return result



@pytest.fixture(scope="session")
def three_tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The dashboard on its own (no router: usage and idle times are not known), over the
    example site whose gpu-node-01 captured the three-tier fabric f_three_tier_row9."""
    import json

    import uvicorn
    from fastapi import FastAPI

    from llmgw.views import Runtime, SiteDataCache
    from llmgw.web import DashboardSources, dashboard_router, handed_in

    root = example_site(tmp_path_factory.mktemp("three-tier"), state=False)
    facts_path = root / "facts" / "gpu-node-01.json"
    facts = json.loads(facts_path.read_text())
    capture = REPO / "tests" / "fabric" / "captures" / "f_three_tier_row9.ibnetdiscover.txt"
    facts["ibnetdiscover"] = capture.read_text()
    facts_path.write_text(json.dumps(facts))
    ship_site_copy_files(root)  # the fabrics mapped on the bastion, as apply ships them
    app = FastAPI()
    app.include_router(dashboard_router(DashboardSources(site=SiteDataCache(root),
                                                         runtime=handed_in(Runtime.unknown("no router here")))))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(300):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
