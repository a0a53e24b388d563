"""Capability checks against a live model, through the router or on one engine directly.

Each check asks for something small and judges only what the engine guarantees, never
the text's sense (a tiny random model talks nonsense):

    chat        a chat completion with at least one output token
    stream      the same streamed: content chunks, then [DONE]
    completion  a plain completion with text
    embeddings  a vector of numbers; an engine that says it serves none -> unsupported
    tools       a round trip: `tool_choice: required` must yield a call of the one tool
                offered with arguments valid for its schema (constrained decoding does
                that, when the engine and the chat template support tools), then the
                tool's result goes back and the model must answer
    json        JSON mode with a schema (`response_format: json_schema`): the answer must
                parse and match the schema, which constrained decoding guarantees

Statuses: pass, fail (with why), unsupported (the engine said it does not do this).
A 401/403 is no verdict on the model: it raises, so a wrong key never stores a "fail".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from llmgw.catalog import CAPABILITIES
from llmgw.errors import LlmgwError
from llmgw.probe.bench import error_text
from llmgw.probe.sse import SseChunks

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                   "required": ["city"], "additionalProperties": False}}}
JSON_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
               "additionalProperties": False}
# What engines say when they do not serve something (llama-server: 501 not_supported_error).
_UNSUPPORTED_STATUS = (404, 501)


@dataclass(frozen=True)
class CheckResult:
    capability: str
    status: str  # pass | fail | unsupported
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"capability": self.capability, "status": self.status, "detail": self.detail}


class _Verdict(Exception):
    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Checker:
    """Runs checks against `base_url` (a router, or one engine) as `key` for `model`."""

    def __init__(self, client: httpx.Client, base_url: str, key: str, model: str, timeout: float = 120.0) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.model = model
        self.timeout = timeout
        self.fingerprint: str | None = None

    def _post(self, path: str, payload: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            resp = self.client.post(self.base_url + path, json={"model": self.model, **payload},
                                    headers={"Authorization": f"Bearer {self.key}"}, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise _Verdict("fail", f"{what}: no answer from {self.base_url} ({type(exc).__name__})") from None
        if resp.status_code in (401, 403):
            raise LlmgwError(f"{self.base_url} refused the API key ({error_text(resp.status_code, resp.content)})",
                             hint="set $LLMGW_API_KEY (or --key-file) to a key of the routers' store")
        if resp.status_code != 200:
            status = "unsupported" if resp.status_code in _UNSUPPORTED_STATUS else "fail"
            raise _Verdict(status, f"{what}: {error_text(resp.status_code, resp.content)}")
        try:
            data = resp.json()
        except ValueError:
            raise _Verdict("fail", f"{what}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise _Verdict("fail", f"{what}: the answer is not a JSON object")
        self.fingerprint = data.get("system_fingerprint") or self.fingerprint
        return data

    @staticmethod
    def _message(data: dict[str, Any], what: str) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
                or not isinstance(choices[0].get("message"), dict):
            raise _Verdict("fail", f"{what}: the answer has no choices[0].message")
        msg: dict[str, Any] = choices[0]["message"]
        return msg

    def chat(self) -> str:
        data = self._post("/v1/chat/completions", {"max_tokens": 8, "temperature": 0,
                                                   "messages": [{"role": "user", "content": "Say hello."}]}, "chat")
        msg = self._message(data, "chat")
        tokens = (data.get("usage") or {}).get("completion_tokens")
        if not isinstance(msg.get("content"), str) or not isinstance(tokens, int) or tokens < 1:
            raise _Verdict("fail", "chat: no content or no completion tokens in the usage")
        return f"{tokens} tokens"

    def stream(self) -> str:
        payload = {"model": self.model, "max_tokens": 8, "temperature": 0, "stream": True,
                   "messages": [{"role": "user", "content": "Say hello."}]}
        chunks = 0
        stream = SseChunks()
        try:
            with self.client.stream("POST", self.base_url + "/v1/chat/completions", json=payload,
                                    headers={"Authorization": f"Bearer {self.key}"}, timeout=self.timeout) as resp:
                if resp.status_code in (401, 403):
                    raise LlmgwError(f"{self.base_url} refused the API key "
                                     f"({error_text(resp.status_code, resp.read())})")
                if resp.status_code != 200:
                    raise _Verdict("fail", f"stream: {error_text(resp.status_code, resp.read())}")
                if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                    raise _Verdict("fail", f"stream: the answer is {resp.headers.get('content-type')}, "
                                           "not text/event-stream")
                for line in resp.iter_lines():
                    chunk = stream.feed(line)
                    if stream.done:
                        break
                    if chunk is None:
                        continue
                    if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                        chunks += 1
        except httpx.HTTPError as exc:
            raise _Verdict("fail", f"stream: broken off ({type(exc).__name__})") from None
        except ValueError:
            raise _Verdict("fail", "stream: a chunk is not JSON") from None
        if not chunks or not stream.done:
            raise _Verdict("fail", f"stream: {chunks} content chunks, {'' if stream.done else 'no '}[DONE]")
        return f"{chunks} content chunks, then [DONE]"

    def completion(self) -> str:
        data = self._post("/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0}, "completion")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0].get("text"), str):
            raise _Verdict("fail", "completion: the answer has no choices[0].text")
        return "text returned"

    def embeddings(self) -> str:
        data = self._post("/v1/embeddings", {"input": "hello"}, "embeddings")
        items = data.get("data")
        vec = items[0].get("embedding") if isinstance(items, list) and items and isinstance(items[0], dict) else None
        if not isinstance(vec, list) or not vec or not all(isinstance(v, int | float) for v in vec):
            raise _Verdict("fail", "embeddings: the answer has no data[0].embedding of numbers")
        return f"a vector of {len(vec)}"

    def tools(self) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]
        data = self._post("/v1/chat/completions", {"max_tokens": 64, "temperature": 0, "messages": messages,
                                                   "tools": [TOOL], "tool_choice": "required"}, "tools")
        msg = self._message(data, "tools")
        calls = msg.get("tool_calls")
        if not isinstance(calls, list) or not calls:
            raise _Verdict("fail", "tools: the reply has no tool call although one was required (the engine or "
                                   "the model's chat template does not support tools; llama-server needs --jinja "
                                   "and a template with tools)")
        call: dict[str, Any] = calls[0] if isinstance(calls[0], dict) else {}
        fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
        if fn.get("name") != "get_weather":
            raise _Verdict("fail", f"tools: the call names {fn.get('name')!r}, not the tool offered (get_weather)")
        try:
            args = json.loads(fn.get("arguments") or "")
        except (TypeError, ValueError):
            raise _Verdict("fail", "tools: the call's arguments are not JSON") from None
        if not isinstance(args, dict) or args.get("city") not in ("Paris", "Oslo") or set(args) != {"city"}:
            raise _Verdict("fail", f"tools: the arguments {args!r} do not match the tool's schema")
        messages += [{"role": "assistant", "content": msg.get("content"), "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call.get("id") or "call-0", "content": '{"celsius": 21}'}]
        answer = self._message(self._post("/v1/chat/completions", {"max_tokens": 8, "temperature": 0,
                                                                   "messages": messages, "tools": [TOOL]},
                                          "tools (the result sent back)"), "tools (the result sent back)")
        if not isinstance(answer.get("content"), str) and not answer.get("tool_calls"):
            raise _Verdict("fail", "tools: no answer after the tool's result")
        return f"called get_weather({args['city']}), answered after the result"

    def json(self) -> str:
        data = self._post("/v1/chat/completions", {
            "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "answer", "strict": True, "schema": JSON_SCHEMA}}}, "json")
        content = self._message(data, "json").get("content")
        try:
            value = json.loads(content) if isinstance(content, str) else None
        except ValueError:
            value = None
        if not isinstance(value, dict) or set(value) != {"ok"} or not isinstance(value["ok"], bool):
            shown = content if isinstance(content, str) else repr(content)
            raise _Verdict("fail", f"json: the answer does not match the schema: {shown[:80]!r}")
        return f"valid JSON for the schema: {json.dumps(value)}"

    def run(self, capability: str) -> CheckResult:
        try:
            return CheckResult(capability, "pass", getattr(self, capability)())
        except _Verdict as v:
            return CheckResult(capability, v.status, v.detail)


def run_checks(client: httpx.Client, base_url: str, key: str, model: str,
               capabilities: Sequence[str] = CAPABILITIES) -> tuple[list[CheckResult], str | None]:
    """The checks in `capabilities` (in CAPABILITIES order) and the engine's fingerprint."""
    unknown = [c for c in capabilities if c not in CAPABILITIES]
    if unknown:
        raise LlmgwError(f"unknown capabilities {', '.join(unknown)}", hint=f"known: {', '.join(CAPABILITIES)}")
    checker = Checker(client, base_url, key, model)
    results = [checker.run(c) for c in CAPABILITIES if c in capabilities]
    return results, checker.fingerprint
