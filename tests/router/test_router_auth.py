"""API keys, the exact auth-exempt paths, quotas on the group tree, and usage accounting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from llmgw.router.auth import AUTH_EXEMPT_PATHS
from llmgw.store import Store
from tests.support.router import HTTP, Engine, RunningRouter, StateFile, model, replica, wait_until

MESSAGES: list[Any] = [{"role": "user", "content": "Hi."}]

EXEMPT = ["/", "/health"]
NOT_EXEMPT = ["/v1/models", "/v1/models/tiny", "/v1/chat/completions", "/v1/completions", "/v1/embeddings",
              "/v1", "/v1/", "/health/", "/healthz", "/index.html", "//", "/metrics", "/docs",
              "/openapi.json", "/api/v1/replicas", "/api/v1/usage", "/favicon.ico", "/%2F"]


def test_exempt_paths_are_exactly_these() -> None:
    assert sorted(AUTH_EXEMPT_PATHS) == sorted(EXEMPT)


def test_every_path_but_the_exempt_ones_needs_a_key(state: StateFile, start_router: Callable[..., RunningRouter],
                                                    api_key: str) -> None:
    state.write([model("tiny")], [])
    router = start_router(state.path)
    for path in EXEMPT:
        for method in ("GET", "HEAD"):  # load balancers probe with either
            r = HTTP.request(method, router.base_url + path)
            assert r.status_code == 200, (method, path)
    for path in NOT_EXEMPT:
        for method in ("GET", "POST"):
            r = HTTP.request(method, router.base_url + path)
            assert r.status_code == 401, (method, path, r.status_code)
            assert r.json()["error"]["type"] == "authentication_error", path


def test_landing_page_shows_how_to_connect_and_no_data(state: StateFile, start_router: Callable[..., RunningRouter],
                                                       api_key: str) -> None:
    state.write([model("secret-model-name")], [replica("r0", "secret-model-name", "http://127.0.0.1:9")])
    router = start_router(state.path)
    page = HTTP.get(router.base_url + "/").text
    port = router.server.addresses["client"][1]
    assert f"http://127.0.0.1:{port}/v1" in page
    assert "secret-model-name" not in page and "r0" not in page and "127.0.0.1:9" not in page
    proxied = HTTP.get(router.base_url + "/", headers={"X-Forwarded-Proto": "https",
                                                        "X-Forwarded-Host": "llm.example.com, inner",
                                                        "X-Forwarded-Prefix": "/gw"}).text
    assert "https://llm.example.com/gw/v1" in proxied
    evil = HTTP.get(router.base_url + "/", headers={"X-Forwarded-Host": '"><script>alert(1)</script>'}).text
    assert "<script>alert" not in evil and "&lt;script&gt;" in evil


def test_no_keys_at_all_says_how_to_create_one(state: StateFile, start_router: Callable[..., RunningRouter]) -> None:
    state.write([model("tiny")], [])
    router = start_router(state.path)  # the store has no key
    for headers in ({}, {"Authorization": "Bearer sk-llmgw-guess"}):
        r = HTTP.get(router.base_url + "/v1/models", headers=headers)
        assert r.status_code == 401
        assert "llmgw keys create" in r.json()["error"]["message"]


def test_missing_wrong_new_and_revoked_keys(state: StateFile, start_router: Callable[..., RunningRouter],
                                            sqlite_store: Store, api_key: str) -> None:
    state.write([model("tiny")], [])
    router = start_router(state.path)
    with pytest.raises(openai.AuthenticationError) as info:
        router.client("sk-llmgw-wrong").models.list()
    assert info.value.code == "invalid_api_key"
    r = HTTP.get(router.base_url + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    r = HTTP.get(router.base_url + "/v1/models", headers={"Authorization": f"Basic {api_key}"})
    assert r.status_code == 401
    assert router.client(api_key).models.list().data == []
    _, fresh = sqlite_store.create_key("fresh")  # a key made after the router started works at once
    assert router.client(fresh).models.list().data == []
    sqlite_store.revoke_key("fresh")

    def refused() -> bool:
        try:
            router.client(fresh).models.list()
        except openai.AuthenticationError:
            return True
        return False

    wait_until(refused, 10, "the revoked key to be refused")
    assert router.client(api_key).models.list().data == []


@pytest.mark.engine
def test_quotas_on_the_group_tree_and_usage(engines: Callable[..., Engine], state: StateFile,
                                            start_router: Callable[..., RunningRouter], sqlite_store: Store) -> None:
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    sqlite_store.set_group("org", rpm=3)
    sqlite_store.set_group("team", parent="org")  # no limit of its own: the parent's applies
    # A request is admitted while its prompt bound (a token per body byte) fits beside what is
    # used: the limit leaves room for several requests, then the budget ends them.
    sqlite_store.set_group("budget", tokens_per_day=400)
    team_key_rec, team_key = sqlite_store.create_key("team-key", "team")
    _, budget_key = sqlite_store.create_key("budget-key", "budget")
    _, free_key = sqlite_store.create_key("free-key")
    router = start_router(state.path)

    team = router.client(team_key)
    for _ in range(3):
        team.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    with pytest.raises(openai.RateLimitError) as info:
        team.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert "'org'" in info.value.message and "3 requests per minute" in info.value.message
    assert int(info.value.response.headers["retry-after"]) >= 1

    budget = router.client(budget_key)
    first = budget.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16)
    assert first.usage is not None and first.usage.total_tokens < 400
    # A stream whose client did not ask for usage is counted all the same.
    chunks = list(budget.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16, stream=True))
    assert all(c.usage is None for c in chunks)
    admitted = 2
    with pytest.raises(openai.RateLimitError) as info:
        for _ in range(30):
            budget.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16)
            admitted += 1
    assert info.value.code == "insufficient_quota" and "400 tokens per day" in info.value.message

    free = router.client(free_key)
    for _ in range(5):  # no group, no limit
        free.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)

    usage = router.admin("/api/v1/usage")
    keys = {k["name"]: k for k in usage["keys"]}
    assert keys["team-key"]["requests"] == 3 and keys["team-key"]["id"] == team_key_rec.id
    assert keys["team-key"]["completion_tokens"] == 6 and keys["team-key"]["models"]["tiny"]["requests"] == 3
    assert keys["budget-key"]["requests"] == admitted
    assert keys["budget-key"]["completion_tokens"] == 16 * admitted
    assert keys["budget-key"]["total_tokens"] == admitted * first.usage.total_tokens
    assert keys["budget-key"]["total_tokens"] <= 400 + 16  # only the last completion may pass the limit
    assert keys["free-key"]["requests"] == 5
    groups = {g["name"]: g for g in usage["groups"]}
    assert groups["org"]["requests"] == groups["team"]["requests"] == 3  # a subtree counts for its parents
    assert groups["org"]["rpm"] == 3 and groups["budget"]["tokens_per_day"] == 400
    assert groups["budget"]["total_tokens"] == keys["budget-key"]["total_tokens"]
    stored = {r.key_id: r for r in sqlite_store.usage(usage["day"])}
    assert stored[team_key_rec.id].requests == 3  # written to the store, in batches
    text = HTTP.get(router.admin_url + "/metrics").text
    assert 'llmgw_rejected_requests_total{reason="quota"} 2.0' in text
