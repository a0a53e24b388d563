"""The engines' own /metrics, relayed by the router with each replica's key (llama-server
answers /metrics only with it), relabelled per replica; engines that cannot be read
show as down and add nothing."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.router.engine_keys import ENGINE_KEYS_FILE
from tests.support.net import free_port
from tests.support.router import HTTP, RunningRouter, StateFile, model, replica, start_engine

pytestmark = pytest.mark.engine

KEY = "llmgw-engine-" + "m" * 40


@pytest.fixture
def keyed_engine(tmp_path: Path) -> Iterator[str]:
    """llama-server with --metrics, requiring KEY (from its environment, as the unit gives it)."""
    eng = start_engine(tmp_path, "tiny", parallel=2, ctx=2048, env={"LLAMA_API_KEY": KEY}, timeout=60)
    try:
        yield eng.endpoint
    finally:
        eng.kill()


class _Odd(http.server.BaseHTTPRequestHandler):
    """An engine whose /metrics is not the text format, or redirects elsewhere."""

    def do_GET(self) -> None:
        if self.path == "/metrics" and self.server.server_port % 2:  # type: ignore[attr-defined]
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/metrics")
            self.end_headers()
            return
        body = b"this is { not prometheus\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_engine_metrics_relayed_with_the_key_and_relabelled(
        keyed_engine: str, state: StateFile, start_router: Callable[..., RunningRouter]) -> None:
    assert HTTP.get(keyed_engine + "/metrics").status_code == 401  # Prometheus could not scrape it itself
    odd = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Odd) for _ in range(2)]
    for s in odd:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        keys = state.path.with_name(ENGINE_KEYS_FILE)
        keys.write_text(json.dumps({"tiny-0": KEY}))
        keys.chmod(0o600)
        state.write([model("tiny"), model("odd")],
                    [replica("tiny-0", "tiny", keyed_engine),
                     *(replica(f"odd-{i}", "odd", f"http://127.0.0.1:{s.server_port}") for i, s in enumerate(odd)),
                     replica("gone-0", "odd", f"http://127.0.0.1:{free_port()}")])
        router = start_router(state.path, metrics=True)
        page = HTTP.get(router.metrics_url + "/metrics/engines")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
        samples = [s for f in text_string_to_metric_families(page.text) for s in f.samples]
        up = {s.labels["replica"]: s.value for s in samples if s.name == "llmgw_engine_up"}
        assert up == {"tiny-0": 1.0, "odd-0": 0.0, "odd-1": 0.0, "gone-0": 0.0}
        mine = [s for s in samples if s.name.startswith("llamacpp:")]
        assert mine and all(s.labels == {"model": "tiny", "replica": "tiny-0"} for s in mine)
        assert {s.name for s in mine} >= {"llamacpp:tokens_predicted_total", "llamacpp:requests_processing"}
        assert KEY not in page.text
        # The admin listener serves the same page.
        assert "llmgw_engine_up" in HTTP.get(router.admin_url + "/metrics/engines").text
    finally:
        for s in odd:
            s.shutdown()
            s.server_close()
