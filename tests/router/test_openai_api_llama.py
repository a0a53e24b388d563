"""The Responses API, rerank and the tokenizer: the real `openai` client through the router
in front of real llama-server replicas (the lab's engine, tiny model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from llmgw.store import Store
from tests.support.router import HTTP, Engine, RunningRouter, StateFile, model, replica

pytestmark = pytest.mark.engine

INPUT = "Say something."


def _events(stream: Any) -> list[Any]:
    return list(stream)


def test_responses_plain_and_streamed(engines: Callable[..., Engine], state: StateFile,
                                      start_router: Callable[..., RunningRouter], sqlite_store: Store) -> None:
    """Plain and streamed, usage counted for the key and against its group's daily tokens,
    and in the metrics, exactly as chat completions are."""
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    direct = e.client().responses.create(model="tiny", input=INPUT, max_output_tokens=8, temperature=0)
    assert direct.usage is not None
    per_response = direct.usage.input_tokens + direct.usage.output_tokens
    # Room for a few: a request is admitted while its prompt bound (a token per body byte)
    # fits beside what is used, so the limit is well above one response's tokens.
    limit = 10 * per_response
    sqlite_store.set_group("budget", tokens_per_day=limit)
    _, key = sqlite_store.create_key("agent-key", "budget")
    router = start_router(state.path)
    client = router.client(key)

    plain = client.responses.create(model="tiny", input=INPUT, max_output_tokens=8, temperature=0)
    assert plain.status == "completed" and plain.output_text == direct.output_text
    assert plain.usage is not None
    assert (plain.usage.input_tokens, plain.usage.output_tokens) == (direct.usage.input_tokens,
                                                                     direct.usage.output_tokens)

    events = _events(client.responses.create(model="tiny", input=INPUT, max_output_tokens=8, temperature=0,
                                             stream=True))
    types = [ev.type for ev in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert types.index("response.output_text.delta") < types.index("response.output_text.done")
    deltas = "".join(ev.delta for ev in events if ev.type == "response.output_text.delta")
    assert deltas == direct.output_text
    completed = events[-1].response
    assert completed.usage is not None and completed.usage.output_tokens == direct.usage.output_tokens

    admitted = 2
    with pytest.raises(openai.RateLimitError) as info:  # the group's daily tokens end it
        for _ in range(10):
            client.responses.create(model="tiny", input=INPUT, max_output_tokens=8, temperature=0)
            admitted += 1
    assert info.value.code == "insufficient_quota"

    usage = {k["name"]: k for k in router.admin("/api/v1/usage")["keys"]}["agent-key"]
    assert usage["requests"] == admitted
    assert usage["prompt_tokens"] == admitted * direct.usage.input_tokens
    assert usage["completion_tokens"] == admitted * direct.usage.output_tokens
    assert usage["total_tokens"] <= limit + 8  # only the last admitted completion may pass the limit
    metrics = HTTP.get(router.admin_url + "/metrics").text
    assert f'llmgw_requests_total{{model="tiny",status="200"}} {float(admitted)}' in metrics
    completion = float(admitted * direct.usage.output_tokens)
    assert f'llmgw_tokens_total{{kind="completion",model="tiny",replica="tiny-0"}} {completion}' in metrics


def test_drain_during_a_streamed_response_cuts_nothing(engines: Callable[..., Engine], state: StateFile,
                                                       start_router: Callable[..., RunningRouter],
                                                       api_key: str) -> None:
    a, b = engines("a", parallel=1, ctx=16384), engines("b", parallel=1, ctx=16384)
    state.write([model("tiny")], [replica("r-a", "tiny", a.endpoint), replica("r-b", "tiny", b.endpoint)])
    router = start_router(state.path)
    client = router.client(api_key)
    stream = client.responses.create(model="tiny", input=INPUT, max_output_tokens=2000, temperature=0,
                                     stream=True)
    it = iter(stream)
    first = next(it)
    assert first.type == "response.created"
    busy = next(r for r in router.admin("/api/v1/replicas")["replicas"] if r["in_flight"] == 1)
    other = "r-b" if busy["id"] == "r-a" else "r-a"
    router.wait_serial(state.set_replica_state(busy["id"], "draining").serial)
    assert router.replica(busy["id"])["in_flight"] == 1  # still streaming
    for _ in range(2):  # new work goes elsewhere
        assert client.responses.create(model="tiny", input=INPUT, max_output_tokens=2).status == "completed"
    assert router.replica(other)["requests"] == 2
    rest = list(it)  # the drained stream runs to its end
    assert rest[-1].type == "response.completed"
    done = rest[-1].response
    assert done.usage is not None and done.usage.output_tokens == 2000  # the tiny model runs to the limit
    deltas = [ev for ev in rest if ev.type == "response.output_text.delta"]
    assert len(deltas) >= 1000
    drained = router.replica(busy["id"])
    assert drained["in_flight"] == 0 and drained["state"] == "draining"


def test_previous_response_id_reaches_the_replica_that_produced_it(
        engines: Callable[..., Engine], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    """Among three replicas. llama-server keeps no responses and says so with its own 400:
    that it answers at all, and on which replica, is what this checks."""
    es = [engines(f"e{i}") for i in range(3)]
    state.write([model("tiny")], [replica(f"tiny-{i}", "tiny", e.endpoint) for i, e in enumerate(es)])
    router = start_router(state.path)
    client = router.client(api_key)

    def served() -> dict[str, int]:
        return {r["id"]: r["requests"] for r in router.admin("/api/v1/replicas")["replicas"]}

    first = client.responses.create(model="tiny", input=INPUT, max_output_tokens=2)
    after_first = served()
    owner = next(rid for rid, n in after_first.items() if n == 1)
    for _ in range(4):  # without affinity the least-loaded pick would rotate over all three
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="tiny", input="And then?", max_output_tokens=2,
                                    previous_response_id=first.id)
        assert "previous_response_id" in info.value.message  # llama-server's own refusal
    now = served()
    assert now[owner] == 5 and sum(now.values()) == 5

    # A streamed response's id (from its response.created event) pins the same way.
    before = served()
    streamed = list(client.responses.create(model="tiny", input=INPUT, max_output_tokens=2, stream=True))
    sid = streamed[0].response.id
    mid = served()
    streamer = next(rid for rid in mid if mid[rid] == before[rid] + 1)
    for _ in range(3):
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="tiny", input="And?", max_output_tokens=2, previous_response_id=sid)
    after = served()
    assert after[streamer] == mid[streamer] + 3 and sum(after.values()) == sum(mid.values()) + 3

    # GET of the id goes to the same replica, whose engine (llama.cpp) does not serve it.
    with pytest.raises(openai.NotFoundError) as not_served:
        client.responses.retrieve(first.id)
    assert not_served.value.code == "endpoint_not_supported" and "llamacpp" in not_served.value.message

    left = [r for r in state.read().replicas if r.id != owner]
    router.wait_serial(state.write(list(state.read().models), left).serial)
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.create(model="tiny", input="And then?", previous_response_id=first.id)
    assert gone.value.code == "previous_response_not_found" and owner in gone.value.message
    assert gone.value.param == "previous_response_id"


def test_tokenize_and_detokenize_on_llama_server(engines: Callable[..., Engine], state: StateFile,
                                                 start_router: Callable[..., RunningRouter], api_key: str) -> None:
    e = engines("tiny")
    state.write([model("tiny", aliases=("small",))], [replica("tiny-0", "tiny", e.endpoint)])
    router = start_router(state.path)
    auth = {"Authorization": f"Bearer {api_key}"}
    direct = HTTP.post(e.endpoint + "/tokenize", json={"content": "hello world"}).json()
    via = HTTP.post(router.base_url + "/v1/tokenize", json={"model": "small", "content": "hello world"},
                    headers=auth)
    assert via.status_code == 200 and via.json() == direct and direct["tokens"]
    back = HTTP.post(router.base_url + "/v1/detokenize", json={"model": "tiny", "tokens": direct["tokens"]},
                     headers=auth)
    assert back.status_code == 200
    assert back.json() == HTTP.post(e.endpoint + "/detokenize", json={"tokens": direct["tokens"]}).json()
    # llama-server has no /v1/score: the router says so rather than forwarding it.
    score = HTTP.post(router.base_url + "/v1/score", json={"model": "tiny", "text_1": "a", "text_2": "b"},
                      headers=auth)
    assert score.status_code == 404 and score.json()["error"]["code"] == "endpoint_not_supported"
    assert router.admin("/api/v1/usage")["keys"][0]["requests"] == 2


def test_rerank_on_llama_server(engines: Callable[..., Engine], state: StateFile,
                                start_router: Callable[..., RunningRouter], api_key: str) -> None:
    e = engines("ranker", extra=("--reranking",))
    state.write([model("ranker")], [replica("ranker-0", "ranker", e.endpoint)])
    router = start_router(state.path)
    body = {"model": "ranker", "query": "a cat", "documents": ["a dog", "a cat", "a car"]}
    direct = HTTP.post(e.endpoint + "/v1/rerank", json=body)
    via = HTTP.post(router.base_url + "/v1/rerank", json=body, headers={"Authorization": f"Bearer {api_key}"})
    assert direct.status_code == 200, direct.text
    assert via.status_code == 200 and via.json()["results"] == direct.json()["results"]
    assert len(via.json()["results"]) == 3
    usage = router.admin("/api/v1/usage")["keys"][0]
    assert usage["requests"] == 1 and usage["prompt_tokens"] == direct.json()["usage"]["total_tokens"] > 0


def test_transcription_reaches_llama_server(engines: Callable[..., Engine], state: StateFile,
                                            start_router: Callable[..., RunningRouter], api_key: str) -> None:
    """llama-server serves transcriptions only with an audio model; the tiny text model has
    none, so the engine's own 501 comes back: the form reached it, routed by its `model`."""
    e = engines("tiny")
    state.write([model("tiny")], [replica("tiny-0", "tiny", e.endpoint)])
    router = start_router(state.path)
    files = {"file": ("a.wav", b"RIFF" + b"\0" * 4000, "audio/wav")}
    direct = HTTP.post(e.endpoint + "/v1/audio/transcriptions", data={"model": "tiny"}, files=files)
    via = HTTP.post(router.base_url + "/v1/audio/transcriptions", data={"model": "tiny"}, files=files,
                    headers={"Authorization": f"Bearer {api_key}"})
    assert direct.status_code == 501 and "audio" in direct.json()["error"]["message"]
    assert (via.status_code, via.json()) == (direct.status_code, direct.json())
    # Translations are not llama-server's: the router says so without asking it.
    other = HTTP.post(router.base_url + "/v1/audio/translations", data={"model": "tiny"}, files=files,
                      headers={"Authorization": f"Bearer {api_key}"})
    assert other.status_code == 404 and other.json()["error"]["code"] == "endpoint_not_supported"
