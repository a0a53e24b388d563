"""The endpoints beyond chat: rerank, score, audio (multipart), tokenize, responses by id.

Routed by model through the real router (real listeners, auth, quotas, usage) to a
narrow test double of an engine speaking vLLM's paths (tests/support/engine_double.py):
the lab's llama-server has no audio model, no cross-encoder and keeps no responses.
What llama-server itself serves through the router is in test_responses_api.py. Also:
docs/compat.md says exactly what llmgw/router/endpoints.py declares, and every endpoint
in it is exercised here or there.
"""

from __future__ import annotations

import dataclasses
import io
import re
import socket
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from llmgw.engines import descriptor
from llmgw.router.bodies import find_field, multipart_boundary
from llmgw.router.endpoints import ENDPOINTS, match, served, upstream_path
from llmgw.router.openai_errors import RouterError
from llmgw.router.responses import Produced, ResponseAffinity
from llmgw.state import Replica, Shard
from tests.support.engine_double import EngineDouble
from tests.support.router import FAST, HTTP, REPO, RunningRouter, StateFile, model, wait_until

COMPAT = REPO / "docs" / "compat.md"


def double_replica(rid: str, model_name: str, d: EngineDouble, engine: str = "vllm") -> Replica:
    return Replica(id=rid, model=model_name, profile="gpu", engine=engine, state="ready", endpoint=d.endpoint,
                   shards=[Shard(node="localhost", rank=0, port=d.port, unit=f"llmgw-{rid}-0.service")])


@pytest.fixture
def doubles() -> Iterator[Callable[..., EngineDouble]]:
    started: list[EngineDouble] = []

    def start(name: str, *models: str) -> EngineDouble:
        d = EngineDouble(name, models).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def pair(doubles: Callable[..., EngineDouble], state: StateFile, start_router: Callable[..., RunningRouter]
         ) -> tuple[EngineDouble, EngineDouble, RunningRouter]:
    """Two models on two doubles; `whisper` also answers to the alias `asr`."""
    w, r = doubles("w", "whisper"), doubles("r", "ranker")
    state.write([model("whisper", aliases=("asr",)), model("ranker")],
                [double_replica("whisper-0", "whisper", w), double_replica("ranker-0", "ranker", r)])
    router = start_router(state.path)
    wait_until(lambda: all(x["health"] == "healthy" for x in router.admin("/api/v1/replicas")["replicas"]), 10,
               "both doubles healthy")
    return w, r, router


def _post(router: RunningRouter, key: str, path: str, headers: dict[str, str] | None = None,
          **kw: object) -> httpx.Response:
    return HTTP.post(router.base_url + path, headers={"Authorization": f"Bearer {key}", **(headers or {})},
                     **kw)  # type: ignore[arg-type]


# -- the declaration and its documentation -----------------------------------------------
def _compat_rows() -> dict[str, dict[str, str]]:
    """docs/compat.md's table: endpoint key -> column -> cell."""
    lines = [ln for ln in COMPAT.read_text(encoding="utf-8").splitlines() if ln.startswith("| `")]
    header = next(ln for ln in COMPAT.read_text(encoding="utf-8").splitlines() if ln.startswith("| Endpoint"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    rows: dict[str, dict[str, str]] = {}
    for ln in lines:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(cols, cells, strict=True))
    return rows


def test_the_compatibility_table_is_the_declaration() -> None:
    rows = _compat_rows()
    assert list(rows) == list(ENDPOINTS), "docs/compat.md lists the endpoints of endpoints.py, in its order"
    for key, row in rows.items():
        for engine in descriptor.names():
            path = descriptor.get(engine).endpoints.get(key)
            cell = row[engine]
            if path is None:
                assert cell == "—", f"{key} on {engine}: compat.md says {cell!r}, endpoints.py says not served"
            else:
                assert f"`{path}`" in cell, f"{key} on {engine}: compat.md says {cell!r}, endpoints.py says {path}"
        assert row["through the router"].startswith("yes"), key
        test = re.search(r"`(tests/router/\S+\.py)::(\w+)`", row["tested by"])
        assert test is not None, f"{key}: compat.md names no test"
        source = (REPO / test.group(1)).read_text(encoding="utf-8")
        assert f"def {test.group(2)}(" in source, f"{key}: {test.group(0)} does not exist"


def test_matching_paths() -> None:
    assert match("POST", "/v1/rerank") is not None
    found = match("GET", "/v1/responses/resp_abc-1")
    assert found is not None and found.response_id == "resp_abc-1" and found.endpoint.by_response_id
    cancel = match("POST", "/v1/responses/resp_1/cancel")
    assert cancel is not None and cancel.endpoint.key == "POST /v1/responses/{id}/cancel"
    for bad in ("/v1/responses/a/../../x", "/v1/responses/a%2Fb", "/v1/responses/" + "x" * 201,
                "/v1/load_lora_adapter", "/tokenize", "/v1/responses/x/other"):
        assert match("GET", bad) is None and match("POST", bad) is None, bad
    assert match("GET", "/v1/rerank") is None
    assert upstream_path("llamacpp", ENDPOINTS["POST /v1/tokenize"]) == "/tokenize"
    assert upstream_path("llamacpp", ENDPOINTS["POST /v1/score"]) is None
    assert "POST /v1/score" in served(["vllm"]) and "POST /v1/score" not in served(["llamacpp"])
    # No replica yet (on demand): whatever some engine serves; never what none does.
    assert "POST /v1/score" in served([]) and "DELETE /v1/responses/{id}" not in served([])


def test_the_model_field_of_a_multipart_body() -> None:
    def form(*parts: tuple[str, bytes]) -> bytes:
        out = b"preamble\r\n"
        for name, value in parts:
            out += (b"--XyZ\r\nContent-Disposition: form-data; name=\"" + name.encode() + b"\"\r\n\r\n"
                    + value + b"\r\n")
        return out + b"--XyZ--\r\n"

    body = form(("file", b"\x00" * 100 + b"\r\n--Xy"), ("model", b"whisper"), ("language", b"en"))
    start, end = find_field(body, b"XyZ", "model")  # type: ignore[misc]
    assert body[start:end] == b"whisper"
    assert find_field(body[:start + 3], b"XyZ", "model") is True  # more is needed
    assert find_field(form(("file", b"abc")), b"XyZ", "model") is False  # the end, without it
    assert multipart_boundary('multipart/form-data; boundary="a b"') == b"a b"
    for bad in (None, "application/json", "multipart/form-data"):
        with pytest.raises(RouterError):
            multipart_boundary(bad)


def test_response_ids_are_remembered_within_a_bound() -> None:
    ids = ResponseAffinity(capacity=3)
    for i in range(3):
        ids.remember(f"resp_{i}", f"r{i}", "m")
    assert ids.get("resp_0") is not None  # now the most recently used
    ids.remember("resp_3", "r3", "m")
    assert len(ids) == 3 and ids.get("resp_1") is None and ids.get("resp_0") == Produced("r0", "m")
    ids.forget("resp_0")
    assert ids.get("resp_0") is None


def test_no_engine_management_path_is_declared() -> None:
    """Loading adapters, profiling, sleeping, slots, props: never forwarded."""
    for engine in descriptor.engines():
        for upstream in engine.endpoints.values():
            assert not re.search(r"lora|profile|sleep|wake|slots|props|models/(load|unload)|reset|cache", upstream)


# -- through the router -------------------------------------------------------------------
def test_rerank_routed_by_model(pair: tuple[EngineDouble, EngineDouble, RunningRouter], api_key: str) -> None:
    w, r, router = pair
    resp = _post(router, api_key, "/v1/rerank", json={"model": "ranker", "query": "q", "documents": ["a", "b"]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["served_by"] == "r" and [x["index"] for x in resp.json()["results"]] == [0, 1]
    assert r.paths() == ["POST /v1/rerank"] and w.paths() == []
    usage = router.admin("/api/v1/usage")["keys"][0]
    assert usage["requests"] == 1 and usage["prompt_tokens"] == 14  # the double's usage.total_tokens


def test_score_tokenize_and_detokenize(pair: tuple[EngineDouble, EngineDouble, RunningRouter], api_key: str) -> None:
    _, r, router = pair
    score = _post(router, api_key, "/v1/score", json={"model": "ranker", "text_1": "a", "text_2": "b"})
    assert score.status_code == 200 and score.json()["data"][0]["score"] == 0.5
    tok = _post(router, api_key, "/v1/tokenize", json={"model": "ranker", "prompt": "hi"})
    assert tok.status_code == 200 and tok.json()["tokens"] == [104, 105]
    detok = _post(router, api_key, "/v1/detokenize", json={"model": "ranker", "tokens": [104, 105]})
    assert detok.status_code == 200 and detok.json()["prompt"] == "hi"
    # The engines serve the tokenizer at /tokenize; clients reach it at /v1/tokenize.
    assert r.paths() == ["POST /v1/score", "POST /tokenize", "POST /detokenize"]


def test_multipart_transcription_routed_by_model_and_streamed(
        pair: tuple[EngineDouble, EngineDouble, RunningRouter], api_key: str) -> None:
    """The openai client's own multipart upload, `model` read from the form; the alias is
    rewritten to the model's name in the form on its way to the engine."""
    w, r, router = pair
    client = router.client(api_key)
    audio = bytes(range(256)) * 8192  # 2 MiB
    text = client.audio.transcriptions.create(model="asr", file=("talk.wav", io.BytesIO(audio)),
                                              response_format="json")
    assert text.text == f"w heard {len(audio)} bytes of talk.wav for whisper"
    # (the openai client deprecates translations.create: the same form, sent by httpx)
    translated = _post(router, api_key, "/v1/audio/translations", data={"model": "whisper"},
                       files={"file": ("talk.wav", audio[:1000], "audio/wav")})
    assert translated.json()["text"] == "w heard 1000 bytes of talk.wav for whisper"
    # A form whose `model` comes after the file: the front is read up to it (bounded), the
    # alias rewritten, and the Content-Length the engine gets adjusted to match.
    boundary = "zz"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"late.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode() + audio[:300_000] + (
            f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nasr\r\n"
            f"--{boundary}--\r\n").encode()
    late = _post(router, api_key, "/v1/audio/transcriptions", content=form,
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert late.status_code == 200 and late.json()["text"] == "w heard 300000 bytes of late.wav for whisper"
    assert [(s.path, s.model) for s in w.seen] == [("/v1/audio/transcriptions", "whisper"),
                                                   ("/v1/audio/translations", "whisper"),
                                                   ("/v1/audio/transcriptions", "whisper")]
    assert w.seen[0].upload_bytes == len(audio) and w.seen[0].upload_chunks > 1  # it arrived as a stream
    assert r.seen == []
    assert router.admin("/api/v1/usage")["keys"][0]["requests"] == 3


def test_multipart_without_model_or_with_a_model_that_has_no_audio(
        pair: tuple[EngineDouble, EngineDouble, RunningRouter], api_key: str, state: StateFile) -> None:
    w, _, router = pair
    files = {"file": ("a.wav", b"RIFF....", "audio/wav")}
    no_model = _post(router, api_key, "/v1/audio/transcriptions", files=files)
    assert no_model.status_code == 400 and no_model.json()["error"]["param"] == "model"
    not_form = _post(router, api_key, "/v1/audio/transcriptions", json={"model": "whisper"})
    assert not_form.status_code == 400 and "multipart/form-data" in not_form.json()["error"]["message"]
    unknown = _post(router, api_key, "/v1/audio/transcriptions", files=files, data={"model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    # A model whose engine (llama.cpp here) does not serve translations: a 404 naming both.
    current = state.read()
    router.wait_serial(state.write([*current.models, model("chat")],
                                   [*current.replicas, double_replica("chat-0", "chat", w, "llamacpp")]).serial)
    refused = _post(router, api_key, "/v1/audio/translations", files=files, data={"model": "chat"})
    assert refused.status_code == 404
    err = refused.json()["error"]
    assert err["code"] == "endpoint_not_supported"
    assert "`chat`" in err["message"] and "POST /v1/audio/translations" in err["message"]
    assert w.seen == []


def test_unknown_and_management_endpoints_are_404_naming_endpoint_and_model(
        pair: tuple[EngineDouble, EngineDouble, RunningRouter], api_key: str) -> None:
    w, r, router = pair
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/start_profile", "/v1/sleep",
                 "/v1/classify", "/v1/pooling"):
        resp = _post(router, api_key, path, json={"model": "ranker", "lora_name": "x", "lora_path": "/etc"})
        assert resp.status_code == 404, path
        err = resp.json()["error"]
        assert err["code"] == "unknown_endpoint" and f"POST {path}" in err["message"] and "`ranker`" in err["message"]
        assert "POST /v1/rerank" in err["message"]  # what the model does serve
    for path in ("/start_profile", "/sleep", "/wake_up", "/slots", "/props", "/tokenize"):
        assert _post(router, api_key, path, json={"model": "ranker"}).status_code == 404, path
    bare = _post(router, api_key, "/v1/nothing", content=b"")
    assert bare.status_code == 404 and "POST /v1/nothing" in bare.json()["error"]["message"]
    wrong_method = HTTP.get(router.base_url + "/v1/rerank", headers={"Authorization": f"Bearer {api_key}"})
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert HTTP.post(router.base_url + "/v1/load_lora_adapter", json={}).status_code == 401  # auth first
    assert w.seen == [] and r.seen == []  # nothing reached an engine


def test_models_list_what_each_model_serves(pair: tuple[EngineDouble, EngineDouble, RunningRouter],
                                            api_key: str) -> None:
    _, _, router = pair
    listed = {m.id: m.model_extra for m in router.client(api_key).models.list()}
    assert listed["ranker"] is not None and listed["ranker"]["endpoints"] == served(["vllm"])
    admin = {m["name"]: m for m in router.admin("/api/v1/models")["models"]}
    assert admin["whisper"]["endpoints"] == served(["vllm"])


def test_responses_by_id_follow_the_replica_that_produced_them(
        doubles: Callable[..., EngineDouble], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    """Three doubles serve one model: a follow-up, a GET and a cancel of a response go to
    the double that produced it (which alone keeps it); an unknown id, a DELETE (no engine
    declares one) and a response whose replica left get clear errors."""
    ds = [doubles(f"d{i}", "agent", "other") for i in range(3)]
    state.write([model("agent"), model("other")],
                [double_replica(f"agent-{i}", "agent", d) for i, d in enumerate(ds)]
                + [double_replica("other-0", "other", ds[0])])
    router = start_router(state.path)
    client = router.client(api_key)
    first = client.responses.create(model="agent", input="hello")
    owner = next(d for d in ds if first.id in d.responses)
    for _ in range(4):  # with nothing in flight, least-loaded alone would spread these around
        follow = client.responses.create(model="agent", input="more", previous_response_id=first.id)
        assert follow.output_text == f"{owner.name} after {first.id}"
    assert client.responses.retrieve(first.id).id == first.id
    assert client.responses.cancel(first.id).status == "cancelled"
    assert all(d.seen == [] for d in ds if d is not owner)
    assert owner.paths()[-2:] == [f"GET /v1/responses/{first.id}", f"POST /v1/responses/{first.id}/cancel"]

    with pytest.raises(openai.BadRequestError) as other_model:
        client.responses.create(model="other", input="x", previous_response_id=first.id)
    assert other_model.value.code == "model_mismatch" and "`agent`" in other_model.value.message
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="agent", input="x", previous_response_id="resp_never")
    assert unknown.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError) as deleting:
        client.responses.delete(first.id)
    assert deleting.value.code == "endpoint_not_supported" and "DELETE /v1/responses/{id}" in deleting.value.message

    usage = router.admin("/api/v1/usage")["keys"][0]
    # five made (the double's usage: 5 in, 3 out each); the GET and the cancel count as
    # requests, their stored usage not again; refusals before admission not at all
    assert (usage["requests"], usage["prompt_tokens"], usage["completion_tokens"]) == (7, 25, 15)

    rid = next(r.id for r in state.read().replicas if r.endpoint == owner.endpoint)
    left = [r for r in state.read().replicas if r.id != rid]
    router.wait_serial(state.write(list(state.read().models), left).serial)
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.create(model="agent", input="x", previous_response_id=first.id)
    assert gone.value.code == "previous_response_not_found" and rid in gone.value.message
    with pytest.raises(openai.NotFoundError) as gone_get:
        client.responses.retrieve(first.id)
    assert gone_get.value.code == "response_not_found" and "is gone" in gone_get.value.message


def test_uploads_over_the_limit_and_a_client_that_leaves_mid_upload(
        doubles: Callable[..., EngineDouble], state: StateFile, start_router: Callable[..., RunningRouter],
        api_key: str) -> None:
    w = doubles("w", "whisper")
    state.write([model("whisper")], [double_replica("whisper-0", "whisper", w)])
    router = start_router(state.path, settings=dataclasses.replace(FAST, max_body_bytes=1024 * 1024))
    big = {"file": ("a.wav", b"\0" * (2 * 1024 * 1024), "audio/wav")}
    over = _post(router, api_key, "/v1/audio/transcriptions", files=big, data={"model": "whisper"})
    assert over.status_code == 413 and over.json()["error"]["code"] == "request_too_large"
    assert w.seen == []

    # The front (with the model) arrives, then the client goes away inside the file.
    boundary = "b0undary"
    front = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n"
             f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
             "Content-Type: audio/wav\r\n\r\n").encode() + b"\1" * 10_000
    host, port = router.server.addresses["client"]
    with socket.create_connection((host, port)) as sock:
        sock.sendall((f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n"
                      f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                      "Content-Length: 500000\r\n\r\n").encode() + front)
        wait_until(lambda: router.replica("whisper-0")["in_flight"] == 1, 10, "the upload to reach the engine")
    wait_until(lambda: router.replica("whisper-0")["in_flight"] == 0, 10, "the router to let the upload go")
    after = router.replica("whisper-0")
    assert after["consecutive_failures"] == 0 and after["health"] != "unhealthy"  # the client's doing, not its
    ok = _post(router, api_key, "/v1/audio/transcriptions", files={"file": ("b.wav", b"abc", "audio/wav")},
               data={"model": "whisper"})
    assert ok.status_code == 200 and ok.json()["text"] == "w heard 3 bytes of b.wav for whisper"


def test_each_attempt_gets_its_own_headers(pair: tuple[EngineDouble, EngineDouble, RunningRouter]) -> None:
    """The proxy adds a replica's engine key to the headers: one request's must never be another's."""
    from llmgw.router.calls import Call

    _, _, router = pair
    replicas = list(router.server.router.table.replicas.values())  # type: ignore[union-attr]
    for key in ("POST /v1/rerank", "GET /v1/responses/{id}"):
        found = match(*key.replace("{id}", "resp_1").split(" ", 1))
        assert found is not None
        call = Call({"path": "/", "headers": []}, _never, found, ResponseAffinity())
        first = call.upstream(replicas[0], b"{}")[3]
        first["Authorization"] = "Bearer engine-key-of-replica-0"
        assert "Authorization" not in call.upstream(replicas[1], b"{}")[3]


async def _never() -> dict[str, object]:  # pragma: no cover - never awaited
    raise AssertionError("no client messages here")
