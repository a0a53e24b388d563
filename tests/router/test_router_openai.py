"""The real `openai` client through the router in front of real llama-server replicas."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.router import RouterSettings
from tests.support.router import FAST, HTTP, Engine, RunningRouter, StateFile, model, replica, wait_until

pytestmark = pytest.mark.engine

MESSAGES: list[Any] = [{"role": "user", "content": "Say something."}]


def samples(text: str) -> Callable[..., float]:
    """got(name, **labels): the sum of the samples of `name` whose labels include `labels`."""
    parsed = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def got(name: str, **labels: str) -> float:
        return sum(s.value for s in parsed if s.name == name and labels.items() <= s.labels.items())

    return got


@dataclass
class Fleet:
    a: Engine
    b: Engine
    router: RunningRouter
    client: openai.OpenAI


@pytest.fixture
def fleet(engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
          api_key: str) -> Fleet:
    a, b = engines("tiny-a"), engines("tiny-b")
    state.write([model("tiny", aliases=("small",)), model("ghost"), model("nothing"), model("lazy", min=0)],
                [replica("tiny-0", "tiny", a.endpoint), replica("tiny-1", "tiny", b.endpoint),
                 replica("ghost-0", "ghost", a.endpoint, state="starting")])
    router = start_router(state.path, metrics=True)
    return Fleet(a, b, router, router.client(api_key))


def test_models_lists_only_models_that_can_answer(fleet: Fleet) -> None:
    assert [m.id for m in fleet.client.models.list()] == ["tiny"]
    assert fleet.client.models.retrieve("tiny").owned_by == "llmgw"
    for name in ("ghost", "nothing", "lazy", "unknown"):
        with pytest.raises(openai.NotFoundError):
            fleet.client.models.retrieve(name)


def test_chat_matches_going_direct(fleet: Fleet) -> None:
    args: dict[str, Any] = {"messages": MESSAGES, "max_tokens": 12, "temperature": 0, "seed": 1}
    direct = fleet.a.client().chat.completions.create(model="tiny", **args)
    via = fleet.client.chat.completions.create(model="tiny", **args)
    assert via.choices[0].message.content == direct.choices[0].message.content
    assert via.choices[0].message.content
    assert via.usage is not None and direct.usage is not None
    assert (via.usage.prompt_tokens, via.usage.completion_tokens) == (
        direct.usage.prompt_tokens, direct.usage.completion_tokens)
    assert via.usage.completion_tokens == 12  # the tiny model always runs to max_tokens


def test_chat_stream_matches_going_direct_and_hides_injected_usage(fleet: Fleet) -> None:
    args: dict[str, Any] = {"messages": MESSAGES, "max_tokens": 12, "temperature": 0, "seed": 1, "stream": True}
    direct = list(fleet.a.client().chat.completions.create(model="tiny", **args))
    via = list(fleet.client.chat.completions.create(model="tiny", **args))

    def text(chunks: list[Any]) -> str:
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    assert text(via) == text(direct) and text(via)
    assert [c.choices[0].finish_reason for c in via if c.choices][-1] == "length"
    # The client did not ask for usage: the router asked on its behalf and took it out again.
    assert all(c.usage is None for c in via)
    assert len(via) == len(direct)


def test_chat_stream_with_usage_requested_keeps_it(fleet: Fleet) -> None:
    args: dict[str, Any] = {"messages": MESSAGES, "max_tokens": 7, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}
    direct = [c.usage for c in fleet.a.client().chat.completions.create(model="tiny", **args) if c.usage]
    via = [c.usage for c in fleet.client.chat.completions.create(model="tiny", **args) if c.usage]
    assert len(via) == 1 and via[0] is not None and direct[0] is not None
    assert (via[0].prompt_tokens, via[0].completion_tokens) == (direct[0].prompt_tokens, 7)


def test_completions_plain_and_streamed(fleet: Fleet) -> None:
    args: dict[str, Any] = {"prompt": "Once upon a time", "max_tokens": 9, "temperature": 0, "seed": 3}
    direct = fleet.a.client().completions.create(model="tiny", **args)
    via = fleet.client.completions.create(model="tiny", **args)
    assert via.choices[0].text == direct.choices[0].text and via.choices[0].text
    assert via.usage is not None and via.usage.completion_tokens == 9
    streamed = list(fleet.client.completions.create(model="tiny", stream=True, **args))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == direct.choices[0].text
    assert all(c.usage is None for c in streamed)


def test_alias_resolves_to_the_model(fleet: Fleet) -> None:
    reply = fleet.client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=3)
    assert reply.choices[0].message.content is not None
    assert reply.usage is not None and reply.usage.completion_tokens == 3


def test_unknown_model_is_404_in_openai_shape(fleet: Fleet) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        fleet.client.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert info.value.code == "model_not_found" and "gpt-9" in info.value.message


def test_model_with_nothing_ready_is_503_with_retry_after(fleet: Fleet) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        fleet.client.chat.completions.create(model="ghost", messages=MESSAGES)
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "1"
    assert info.value.code == "no_replica_available"


def test_on_demand_model_without_activator_says_so(fleet: Fleet) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        fleet.client.chat.completions.create(model="lazy", messages=MESSAGES)
    assert info.value.status_code == 503 and "no controller" in info.value.message


def test_bad_requests(fleet: Fleet, api_key: str) -> None:
    url = fleet.router.base_url + "/v1/chat/completions"
    auth = {"Authorization": f"Bearer {api_key}"}
    r = HTTP.post(url, content=b"{not json", headers=auth)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = HTTP.post(url, json={"messages": MESSAGES}, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = HTTP.get(url, headers=auth)
    assert r.status_code == 405 and "error" in r.json()


def test_body_size_limit(engines: Callable[..., Engine], state: StateFile,
                         start_router: Callable[..., RunningRouter], api_key: str) -> None:
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    router = start_router(state.path, settings=RouterSettings(**{**FAST.__dict__, "max_body_bytes": 2000}))
    client = router.client(api_key)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x" * 3000}])
    assert info.value.status_code == 413 and info.value.code == "request_too_large"
    r = HTTP.post(router.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {api_key}"},
                   content=(b"x" for _ in range(3000)))  # chunked, no Content-Length
    assert r.status_code == 413
    assert client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2).choices


def test_embeddings(engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
                    api_key: str) -> None:
    e = engines("embed", extra=("--embeddings", "--pooling", "mean"))
    state.write([model("embed")], [replica("embed-0", "embed", e.endpoint)])
    router = start_router(state.path)
    direct = e.client().embeddings.create(model="embed", input=["hello", "world"])
    via = router.client(api_key).embeddings.create(model="embed", input=["hello", "world"])
    assert [d.embedding for d in via.data] == [d.embedding for d in direct.data]
    assert via.usage.prompt_tokens == direct.usage.prompt_tokens > 0
    usage = router.admin("/api/v1/usage")["keys"][0]
    assert usage["requests"] == 1 and usage["prompt_tokens"] == direct.usage.prompt_tokens


def test_admin_replicas_report_use(fleet: Fleet) -> None:
    before = fleet.router.admin("/api/v1/replicas")
    assert before["serial"] == 1
    rows = {r["id"]: r for r in before["replicas"]}
    assert set(rows) == {"tiny-0", "tiny-1", "ghost-0"}
    assert all("last_used" not in r and r["in_flight"] == 0 and r["requests"] == 0 for r in rows.values())
    assert rows["ghost-0"]["state"] == "starting" and rows["ghost-0"]["routable"] is False
    for _ in range(4):
        fleet.client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    after = {r["id"]: r for r in fleet.router.admin("/api/v1/replicas")["replicas"]}
    assert after["tiny-0"]["requests"] + after["tiny-1"]["requests"] == 4
    assert after["tiny-0"]["requests"] >= 1 and after["tiny-1"]["requests"] >= 1  # both replicas used
    assert "last_used" in after["tiny-0"] and after["tiny-0"]["health"] in ("unknown", "healthy")
    wait_until(lambda: fleet.router.replica("tiny-0")["health"] == "healthy", 10, "the first health check")
    assert "last_used" not in after["ghost-0"]
    assert fleet.router.admin("/api/v1/replicas/tiny-0")["id"] == "tiny-0"
    assert HTTP.get(fleet.router.admin_url + "/api/v1/replicas/nope").status_code == 404
    models = {m["name"]: m for m in fleet.router.admin("/api/v1/models")["models"]}
    assert models["tiny"]["available"] is True and models["tiny"]["replicas"] == {
        "starting": 0, "ready": 2, "draining": 0, "routable": 2}
    assert models["lazy"]["on_demand"] is True and models["lazy"]["available"] is False
    assert models["tiny"]["routing"] == "least-load"  # the state's default: what the router balances by
    assert "last_used" not in models["nothing"]


def test_metrics_on_admin_and_metrics_listener(fleet: Fleet) -> None:
    wait_until(lambda: fleet.router.replica("tiny-1")["health"] == "healthy", 10, "the first health check")
    fleet.client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3)
    assert list(fleet.client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, stream=True))
    with pytest.raises(openai.NotFoundError):
        fleet.client.chat.completions.create(model="gpt-9", messages=MESSAGES)
    for base in (fleet.router.admin_url, fleet.router.metrics_url):
        text = HTTP.get(base + "/metrics").text
        got = samples(text)
        assert 'llmgw_requests_total{model="tiny",status="200"} 2.0' in text
        assert 'llmgw_requests_total{model="-",status="404"} 1.0' in text
        # Per replica, whichever of the two answered: summed over replicas here.
        assert got("llmgw_tokens_total", model="tiny", kind="completion") == 8.0
        assert got("llmgw_replica_responses_total", model="tiny", status="200") == 2.0
        assert got("llmgw_time_to_first_token_seconds_count", model="tiny") == 1.0  # streams only
        assert got("llmgw_inter_token_latency_seconds_count", model="tiny") == 1.0
        assert got("llmgw_queue_wait_seconds_count", model="tiny") == 2.0
        assert 'llmgw_request_duration_seconds_bucket{le="+Inf",model="tiny"}' in text
        assert 'llmgw_replica_in_flight{model="tiny",replica="tiny-0"} 0.0' in text
        assert 'llmgw_replica_healthy{model="tiny",replica="tiny-1"} 1.0' in text
        assert 'llmgw_replica_state{model="ghost",replica="ghost-0",state="starting"} 1.0' in text
        assert "llmgw_state_serial 1.0" in text
    # The metrics listener serves nothing else; the client listener has no /metrics.
    assert HTTP.get(fleet.router.metrics_url + "/api/v1/replicas").status_code == 404
    assert HTTP.get(fleet.router.base_url + "/metrics").status_code == 401
