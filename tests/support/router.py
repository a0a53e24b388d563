"""Router test helpers: the real llama.cpp server with the tiny model (`start_engine`), the
state file the router reads (`StateFile`), and `RouterServer` served in a thread of this
process (`RunningRouter`). tests/router/conftest.py's fixtures (what each gives a test is
said there) are built on them; other areas use them directly.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmgw.router import RouterServer, RouterSettings
from llmgw.site import Site
from llmgw.state import ModelRecord, Replica, ScalingRecord, Shard, State, read_state, write_state
from llmgw.store import Store, open_store
from tests.support.net import free_port
from tests.support.waiting import wait_until

# One client for every test request: a new httpx client per call loads the CA bundle (~0.2 s).
HTTP = httpx.Client(timeout=30)
# Every openai client a test makes, closed after each test (an open pool's sockets would
# surface as ResourceWarnings, which are errors here).
CLIENTS: list[openai.OpenAI] = []


def close_clients() -> None:
    while CLIENTS:
        CLIENTS.pop().close()

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache" / "llmgw"))
ENGINE = CACHE / "engine" / "llama-server"
MODEL = CACHE / "models" / "tiny.gguf"

# Quick loops so tests see changes within a fraction of a second.
FAST = RouterSettings(health_interval=0.3, health_timeout=1.0, state_poll_interval=0.1,
                      key_refresh_interval=0.3, key_miss_refresh_interval=0.2, usage_flush_interval=0.2,
                      backoff_base=0.5, backoff_max=2.0, first_byte_timeout=30.0, chunk_gap_timeout=10.0,
                      activation_timeout=30.0, idle_check_interval=0.2, retry_after=1)


# -- engines ------------------------------------------------------------------------------
@dataclass
class Engine:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> openai.OpenAI:
        c = openai.OpenAI(base_url=self.endpoint + "/v1", api_key="direct", max_retries=0, timeout=60)
        CLIENTS.append(c)
        return c

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_engine(logs: Path, name: str = "e", *, parallel: int = 4, ctx: int = 4096, extra: tuple[str, ...] = (),
                 port: int | None = None, env: dict[str, str] | None = None, timeout: float = 30) -> Engine:
    """The real llama-server with the tiny model on loopback, its log under `logs`, once it
    answers /health; `env` adds to its environment (e.g. LLAMA_API_KEY, as the unit's
    EnvironmentFile gives it). A missing binary or model fails the test, saying what to run."""
    require_engine()
    port = port or free_port()
    log = logs / f"engine-{name}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(ENGINE), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port), "--metrics",
             "--parallel", str(parallel), "-c", str(ctx), "--threads", "1", "--alias", name, *extra],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    eng = Engine(name, port, proc, log)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            return HTTP.get(eng.endpoint + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout, f"llama-server {name} on port {port}")
    except BaseException:
        eng.kill()
        raise
    return eng


def require_engine() -> None:
    if not (ENGINE.is_file() and os.access(ENGINE, os.X_OK)):
        pytest.fail(f"the llama-server binary is missing at {ENGINE}: run scripts/setup-host "
                    "(it builds the engine and the tiny model into $LLMGW_CACHE)", pytrace=False)
    if not MODEL.is_file():
        pytest.fail(f"the tiny model is missing at {MODEL}: run scripts/setup-host", pytrace=False)



def model(name: str, *, aliases: tuple[str, ...] = (), fallbacks: tuple[str, ...] = (), min: int = 1,
          idle_timeout: int = 0) -> ModelRecord:
    return ModelRecord(name=name, aliases=list(aliases), fallbacks=list(fallbacks),
                       scaling=ScalingRecord(min=min, max=max(min, 1), idle_timeout=idle_timeout))


def replica(rid: str, model_name: str, endpoint: str, state: str = "ready") -> Replica:
    port = int(endpoint.rsplit(":", 1)[1])
    return Replica(id=rid, model=model_name, profile="cpu", engine="llamacpp", state=state,  # type: ignore[arg-type]
                   endpoint=endpoint,
                   shards=[Shard(node="localhost", rank=0, port=port, unit=f"llmgw-{rid}-0.service")])


@dataclass
class StateFile:
    path: Path

    def write(self, models: list[ModelRecord], replicas: list[Replica]) -> State:
        current = read_state(self.path)
        return write_state(self.path, State(lineage=current.lineage, models=models, replicas=replicas))

    def set_replica_state(self, rid: str, new_state: str) -> State:
        current = read_state(self.path)
        reps = [r.model_copy(update={"state": new_state}) if r.id == rid else r for r in current.replicas]
        return write_state(self.path, current.model_copy(update={"replicas": reps}))

    def read(self) -> State:
        return read_state(self.path)


@dataclass
class RunningRouter:
    server: RouterServer
    thread: threading.Thread
    store: Store
    errors: list[BaseException] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.addresses['client'][1]}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.server.addresses['admin'][1]}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.server.addresses['metrics'][1]}"

    def client(self, key: str, **kw: Any) -> openai.OpenAI:
        kw.setdefault("timeout", 60)
        c = openai.OpenAI(base_url=self.base_url + "/v1", api_key=key, max_retries=0, **kw)
        CLIENTS.append(c)
        return c

    def admin(self, path: str) -> Any:
        r = HTTP.get(self.admin_url + path, timeout=10)
        r.raise_for_status()
        return r.json()

    def replica(self, rid: str) -> dict[str, Any]:
        return next(r for r in self.admin("/api/v1/replicas")["replicas"] if r["id"] == rid)

    def wait_serial(self, serial: int) -> None:
        wait_until(lambda: self.admin("/api/v1/replicas")["serial"] >= serial, 10, f"state serial {serial}")

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "router did not stop"


def serve_in_thread(server: RouterServer) -> tuple[threading.Thread, list[BaseException]]:
    """Run a RouterServer on uvloop in a daemon thread; return once it listens (or failed to)."""
    import uvloop

    errors: list[BaseException] = []

    def run() -> None:
        try:
            uvloop.run(server.run())
        except BaseException as exc:  # surfaced to the test through `errors`
            errors.append(exc)
            server.started.set()

    thread = threading.Thread(target=run, name="router", daemon=True)
    thread.start()
    assert server.started.wait(30), "router did not start"
    if errors:
        raise errors[0]
    return thread, errors


@contextmanager
def site_router(root: Path, tmp_path: Path) -> Iterator[RouterServer]:
    """A real router over the site at `root` (its state, its dashboard's site copy), both listeners
    on loopback ports of their own, a SQLite store under `tmp_path`; stopped when the block ends."""
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    server = RouterServer(state_path=Site.load(root).state_file, store=store, listen=("127.0.0.1", 0),
                          admin_listen=("127.0.0.1", 0), site_dir=root, graceful_timeout=2,
                          settings=RouterSettings(health_interval=30, state_poll_interval=0.2))
    thread, _errors = serve_in_thread(server)
    try:
        yield server
    finally:
        server.stop()
        thread.join(15)
        store.close()
