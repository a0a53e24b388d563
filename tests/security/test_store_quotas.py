"""Quotas under concurrency, against real routers on one real store.

Several `RouterServer`s (what `llmgw router serve` runs) share one PostgreSQL schema and
are hit at once from many threads, as a client out to beat its limits would. Usage is
flushed on SIGTERM by a router run as its own process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmgw.router import RouterSettings
from llmgw.store import Store, UsageDelta, open_store
from tests.support.net import free_port
from tests.support.router import REPO, Engine, RunningRouter, StateFile, model, replica, wait_until

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2}


@pytest.fixture
def pg_stores(pg_url: str) -> Iterator[list[Store]]:
    """A handle for the test (as the CLI would be) and one per router."""
    stores = [open_store(pg_url) for _ in range(4)]
    yield stores
    for s in stores:
        s.close()


def fire(routers: list[RunningRouter], key: str, n: int, body: dict[str, Any] = BODY) -> list[httpx.Response]:
    """`n` requests at once, spread over the routers; the body sent as `encode` writes it."""
    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=n)) as client, \
            ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: client.post(routers[i % len(routers)].base_url + "/v1/chat/completions",
                                                   content=encode(body),
                                                   headers={"Authorization": f"Bearer {key}",
                                                            "Content-Type": "application/json"}),
                             range(n)))


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def group_tokens(store: Store, key_id: str) -> int:
    return sum(r.total_tokens for r in store.usage() if r.key_id == key_id)


@pytest.mark.postgres
@pytest.mark.engine
def test_a_token_quota_holds_across_three_routers(pg_stores: list[Store], engines: Callable[..., Engine],
                                                  state: StateFile,
                                                  start_router: Callable[..., RunningRouter]) -> None:
    """Tokens used end at most one request's max_tokens over the limit.

    The limit is set one token past a whole number of requests: a router that let the
    last request in while anything at all was left (not checking that its prompt fits)
    ends a prompt's worth over, which this test catches.
    """
    cli, *router_stores = pg_stores
    e = engines("tiny", parallel=4)
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    routers = [start_router(state.path, store=s) for s in router_stores]
    _, free_key = cli.create_key("probe")  # under no limit: what one request costs
    probe = fire(routers[:1], free_key, 1)[0]
    assert probe.status_code == 200, probe.text
    cost = probe.json()["usage"]["total_tokens"]
    assert probe.json()["usage"]["prompt_tokens"] >= 3 > BODY["max_tokens"]  # a prompt's worth is more
    limit = 20 * cost + 1
    cli.set_group("budget", tokens_per_day=limit)
    rec, key = cli.create_key("greedy", "budget")
    waves = 0
    used = 0
    while waves < 10:  # 20 at once, again and again, until the quota refuses a whole wave
        waves += 1
        answers = fire(routers, key, 20)
        assert {r.status_code for r in answers} <= {200, 429}, [r.text[:200] for r in answers]
        served = [r for r in answers if r.status_code == 200]
        for r in answers:
            if r.status_code == 429:
                assert r.json()["error"]["code"] == "insufficient_quota"
        # Every router writes what it served within a flush interval; wait for it.
        for router in routers:
            router.admin("/api/v1/usage")  # flushes that router's counts before answering
        used = group_tokens(cli, rec.id)
        assert used <= limit + BODY["max_tokens"], \
            f"wave {waves}: {used} tokens used against a limit of {limit} (max_tokens {BODY['max_tokens']})"
        if not served:
            break
    print(f"token quota over 3 routers: {used} tokens used against {limit} in {waves} waves of 20, "
          f"{cost} tokens a request, max_tokens {BODY['max_tokens']}")
    assert not served, "the quota never refused a whole wave"
    # Refused only once the prompt's bound (a token per body byte) no longer fits.
    assert used + len(encode(BODY)) > limit
    assert cli.reserved_tokens(time.time()) == 0  # every reservation settled


def test_the_prompt_must_fit_and_only_the_completion_may_pass(sqlite_store: Store) -> None:
    """The store's admission rule, as three routers meet it, one request at a time."""
    from llmgw.store import GroupLimit

    sqlite_store.set_group("g", tokens_per_day=100)
    key = sqlite_store.create_key("k", "g")[0].id
    limits = [GroupLimit("g", None, 100)]

    def admit(rid: str, prompt: int, completion: int) -> bool:
        return sqlite_store.admit(key, limits, now=1000.0, day="d", reserve=prompt + completion, fit=prompt,
                                  reservation_id=rid, expires_at=5000.0) is None

    assert admit("a", 60, 30)  # 90 held
    assert not admit("b", 11, 0)  # its prompt does not fit beside 90 held
    assert admit("c", 10, 500)  # its prompt fits: only its completion may pass
    assert not admit("d", 1, 0)  # nothing left at all
    sqlite_store.add_usage([UsageDelta(key, "d", "m", 1, 50, 0)], [], ["a", "c"], now=1000.0)
    assert not admit("e", 51, 0) and admit("f", 50, 0)


@pytest.mark.postgres
def test_requests_per_minute_hold_across_two_routers(pg_stores: list[Store], state: StateFile,
                                                     start_router: Callable[..., RunningRouter]) -> None:
    cli, a_store, b_store, _ = pg_stores
    state.write([model("tiny")], [])  # no replica: an admitted request gets 503, a refused one 429
    cli.set_group("org", rpm=5)
    cli.set_group("team", parent="org")
    _, key = cli.create_key("burst", "team")
    routers = [start_router(state.path, store=a_store), start_router(state.path, store=b_store)]
    answers = fire(routers, key, 16)
    admitted = [r for r in answers if r.status_code != 429]
    assert {r.status_code for r in admitted} <= {503}
    assert len(admitted) <= 5, f"{len(admitted)} requests admitted against 5 per minute over two routers"
    assert all("'org'" in r.json()["error"]["message"] for r in answers if r.status_code == 429)


def test_reservations_count_n_choices_and_the_default_budget() -> None:
    from llmgw.router.openai_errors import RouterError
    from llmgw.router.quotas import reservation

    s = RouterSettings()
    assert reservation({"max_tokens": 10}, 100, "/v1/chat/completions", s) == 110
    assert reservation({"max_tokens": 10, "n": 5}, 100, "/v1/chat/completions", s) == 150
    assert reservation({"max_tokens": 10, "n_predict": 4}, 100, "/v1/chat/completions", s) == 104
    assert reservation({"prompt": ["a", "b"], "max_tokens": 10, "best_of": 3}, 100, "/v1/completions", s) == 160
    assert reservation({}, 100, "/v1/completions", s) == 100 + s.default_max_tokens
    assert reservation({"max_tokens": 10}, 100, "/v1/embeddings", s) == 100
    for bad in ({"max_tokens": True}, {"n": "9"}, {"max_tokens": 100000.0}, {"n_predict": -1}):
        with pytest.raises(RouterError) as err:  # a 400: never a reservation of the default instead
            reservation(bad, 0, "/v1/chat/completions", s)
        assert err.value.status == 400 and err.value.param == next(iter(bad))


# -- usage survives the router's end ----------------------------------------------------------
_SERVE = textwrap.dedent("""
    import sys, uvloop
    from pathlib import Path
    from llmgw.router import RouterServer, RouterSettings
    from llmgw.store import open_store
    state, store, port, admin, flush = sys.argv[1:6]
    server = RouterServer(state_path=Path(state), store=open_store(store), listen=("127.0.0.1", int(port)),
                          admin_listen=("127.0.0.1", int(admin)), graceful_timeout=5,
                          settings=RouterSettings(usage_flush_interval=float(flush), key_refresh_interval=0.2))
    uvloop.run(server.run(install_signals=True))
""")


def serve_process(tmp_path: Path, state: StateFile, store_url: str,
                  flush: float) -> tuple[subprocess.Popen[bytes], str]:
    port, admin = free_port(), free_port()
    with (tmp_path / f"router-{port}.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", _SERVE, str(state.path), store_url, str(port), str(admin),
                                 str(flush)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError((tmp_path / f"router-{port}.log").read_text()[-2000:])
        try:
            return httpx.get(base + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, 30, "the router process")
    return proc, base


def requests_counted(store: Store, key_id: str) -> int:
    return sum(m.requests for m in store.minute_requests(0) if m.key_id == key_id)


def test_usage_is_written_on_sigterm(tmp_path: Path, state: StateFile, sqlite_store: Store) -> None:
    state.write([model("tiny")], [])
    rec, key = sqlite_store.create_key("counted")
    # A flush interval of an hour: only the stop can write these counts.
    proc, base = serve_process(tmp_path, state, sqlite_store.url, flush=3600)
    try:
        for _ in range(7):
            r = httpx.post(base + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 503, r.text
        assert requests_counted(sqlite_store, rec.id) == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert requests_counted(sqlite_store, rec.id) == 7


def test_kill_9_loses_at_most_one_flush_interval(tmp_path: Path, state: StateFile, sqlite_store: Store) -> None:
    state.write([model("tiny")], [])
    rec, key = sqlite_store.create_key("counted")
    flush = 0.3
    proc, base = serve_process(tmp_path, state, sqlite_store.url, flush=flush)
    try:
        for _ in range(5):
            httpx.post(base + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"})
        # Written by the flush loop alone (no stop, no admin read): what kill -9 cannot take back.
        wait_until(lambda: requests_counted(sqlite_store, rec.id) == 5, 10, "the counts to be written")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert requests_counted(sqlite_store, rec.id) == 5
