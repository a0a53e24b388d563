"""Two routers sharing one PostgreSQL store see the same keys, quotas and usage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from llmgw.store import Store, open_store
from tests.support.router import Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

MESSAGES: list[Any] = [{"role": "user", "content": "Hi."}]


@pytest.fixture
def pg_stores(pg_url: str) -> Iterator[tuple[Store, Store, Store]]:
    """One handle for the test (as the CLI would be) and one per router."""
    stores = (open_store(pg_url), open_store(pg_url), open_store(pg_url))
    yield stores
    for s in stores:
        s.close()


def test_two_routers_share_keys_quotas_and_usage(pg_stores: tuple[Store, Store, Store],
                                                 engines: Callable[..., Engine], state: StateFile,
                                                 start_router: Callable[..., RunningRouter]) -> None:
    # (pg_stores first: the routers stop before the test schema is dropped)
    cli, store_a, store_b = pg_stores
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    cli.set_group("shared", rpm=4)
    key_rec, key = cli.create_key("team", "shared")
    a = start_router(state.path, store=store_a)
    b = start_router(state.path, store=store_b)
    _, later = cli.create_key("later")  # created while both run: both accept it at once
    for r in (a, b):
        assert r.client(later).models.list().data[0].id == "tiny"

    for r in (a, a, b):
        r.client(key).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)

    def usage_everywhere() -> bool:
        return all(next((k for k in r.admin("/api/v1/usage")["keys"] if k["name"] == "team"), {}).get("requests")
                   == 3 for r in (a, b))

    wait_until(usage_everywhere, 10, "both routers to report the same usage")
    for r in (a, b):
        team = next(k for k in r.admin("/api/v1/usage")["keys"] if k["name"] == "team")
        assert team["id"] == key_rec.id and team["completion_tokens"] == 6
        assert next(g for g in r.admin("/api/v1/usage")["groups"] if g["name"] == "shared")["requests"] == 3
    # The group's 4 requests per minute hold across both routers: one more anywhere, then 429
    # (once b has written it and a has read it back: each does so every flush interval).
    b.client(key).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)
    wait_until(lambda: next(k for k in a.admin("/api/v1/usage")["keys"] if k["name"] == "team")["requests"] == 4,
               10, "router a to see b's fourth request")

    def a_refuses() -> bool:
        try:
            a.client(key).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)
        except openai.RateLimitError:
            return True
        raise AssertionError("router a let a fifth request through within the minute")

    assert a_refuses()
    cli.revoke_key("team")

    def revoked_everywhere() -> bool:
        for r in (a, b):
            try:
                r.client(key).models.list()
                return False
            except openai.AuthenticationError:
                pass
        return True

    wait_until(revoked_everywhere, 10, "the revoked key to be refused by both routers")
