"""Which OpenAI endpoints the router forwards, and which engine serves which: declared once.

The router is an allow-list: a client request reaches an engine only on a path declared
here for that engine, so nothing that manages an engine (vLLM's LoRA loading, profiling,
sleep; llama-server's /slots, /props, /lora-adapters, /models/load) is ever reachable
through it. Anything else under /v1/ is a 404 naming the endpoint and the model.

Each engine's descriptor (`endpoints` of llmgw.engines.<engine>.ENGINE) maps a client
endpoint to the path the engine serves it on (the tokenizer endpoints sit at /tokenize on
some engines, at /v1/tokenize for clients); it is read at each lookup, so the registry of
engines is the list. A model serves the endpoints of the engines of its replicas; a
request goes only to the replicas whose engine serves its endpoint. A model with no
replica in the state (on demand, stopped) is taken to serve what any engine serves: the
engine that will start is not known yet.

docs/compat.md is this table and the descriptors' in prose; tests/router/test_endpoints.py keeps the two equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from llmgw.engines import find
from llmgw.engines.descriptor import engines

Body = Literal["json", "multipart", "none"]
Usage = Literal["chat", "responses", "plain"]


@dataclass(frozen=True)
class Endpoint:
    """One client endpoint: its key (`METHOD /path`, ids as `{id}`), body and usage shape."""

    method: str
    path: str  # with `{id}` where a response id goes
    body: Body
    usage: Usage  # chat: streams carry usage when asked (stream_options); responses: in response.completed
    by_response_id: bool = False  # routed to the replica that produced the response id in the path

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def inject_usage(self) -> bool:
        """Streams here carry usage only on request, so the router asks and strips it again."""
        return self.usage == "chat"


_ENDPOINTS = (
    Endpoint("POST", "/v1/chat/completions", "json", "chat"),
    Endpoint("POST", "/v1/completions", "json", "chat"),
    Endpoint("POST", "/v1/embeddings", "json", "plain"),
    Endpoint("POST", "/v1/responses", "json", "responses"),
    Endpoint("GET", "/v1/responses/{id}", "none", "plain", by_response_id=True),
    Endpoint("DELETE", "/v1/responses/{id}", "none", "plain", by_response_id=True),
    Endpoint("POST", "/v1/responses/{id}/cancel", "none", "plain", by_response_id=True),
    Endpoint("POST", "/v1/rerank", "json", "plain"),
    Endpoint("POST", "/v1/score", "json", "plain"),
    Endpoint("POST", "/v1/audio/transcriptions", "multipart", "plain"),
    Endpoint("POST", "/v1/audio/translations", "multipart", "plain"),
    Endpoint("POST", "/v1/tokenize", "json", "plain"),
    Endpoint("POST", "/v1/detokenize", "json", "plain"),
)
ENDPOINTS: dict[str, Endpoint] = {e.key: e for e in _ENDPOINTS}

# A response id as engines make them (resp_…, with vLLM's and SGLang's alphabets): no
# slash, no dot, bounded, so a path can never smuggle another route into the upstream URL.
_ID = r"[A-Za-z0-9_\-]{1,200}"
_BY_ID = re.compile(rf"^/v1/responses/({_ID})(/cancel)?$")


@dataclass(frozen=True)
class Match:
    endpoint: Endpoint
    response_id: str | None = None


_PLAIN = {key: Match(e) for key, e in ENDPOINTS.items() if not e.by_response_id}  # made once: the hot path


def match(method: str, path: str) -> Match | None:
    """The endpoint a client request is for; None when the router forwards no such thing."""
    found = _PLAIN.get(f"{method} {path}")
    if found is not None:
        return found
    m = _BY_ID.match(path)
    if m is not None:
        endpoint = ENDPOINTS.get(f"{method} /v1/responses/{{id}}{m.group(2) or ''}")
        if endpoint is not None:
            return Match(endpoint, m.group(1))
    return None


def methods_for(path: str) -> list[str]:
    """The methods the router forwards on `path` (for a 405's Allow header), if any."""
    out = [e.method for e in _ENDPOINTS if e.path == path]
    m = _BY_ID.match(path)
    if m is not None:
        out += [e.method for e in _ENDPOINTS if e.path == f"/v1/responses/{{id}}{m.group(2) or ''}"]
    return out


def upstream_path(engine: str, endpoint: Endpoint, response_id: str | None = None) -> str | None:
    """Where `engine` serves `endpoint`; None when it does not."""
    known = find(engine)
    path = known.endpoints.get(endpoint.key) if known is not None else None
    if path is None:
        return None
    return path.replace("{id}", response_id) if response_id is not None else path


def served(engines_of: Iterable[str]) -> list[str]:
    """The endpoint keys a model with replicas of these engines serves, in declaration order.

    No engine known (no replica yet): what any engine serves.
    """
    named = set(engines_of)
    pool = [e.endpoints for e in engines() if e.name in named] if named else [e.endpoints for e in engines()]
    return [e.key for e in _ENDPOINTS if any(e.key in p for p in pool)]
