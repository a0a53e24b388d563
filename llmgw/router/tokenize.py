"""Exact prompt counts from the engines' own tokenizers, for quotas near their limit.

A limited key's request is reserved at one token per body byte (quotas.py): safe, and free,
but three to four times what a prompt costs, so near the end of a day a group is refused a
request its remaining tokens would pay for. When that bound is what refuses a request,
quotas.py asks `PromptCounter.count` for the prompt's exact count and admits it by that
instead. Only then: keys under no limit, and limited keys far from their limit, never pay
for a round trip to an engine.

Counted by the engine that will run the request, with the engine key (the router's own
call: clients never reach these paths, router/endpoints.py):

- llama.cpp: `POST /apply-template` with the request (the chat template applied exactly as
  the chat endpoint will), then `POST /tokenize` of that text with the model's special
  tokens, as the completion endpoints tokenize it; `/v1/completions` prompts go to
  `/tokenize` directly;
- vLLM: a Responses request's text input as the chat messages its Responses API renders it
  as (`instructions` first as a system message); then, as for a chat,
- vLLM: `POST /tokenize` with the request's `messages` and `tools` (it applies the chat
  template as its chat endpoint does, with the request's own `add_generation_prompt`,
  `continue_final_message` and `add_special_tokens`, whose defaults are the chat endpoint's),
  or each `prompt` of a completion on its own (its TokenizeCompletionRequest takes one string;
  the special tokens added as the completion endpoint adds them). Checked against vLLM 0.32.0
  (vllm/entrypoints/serve/tokenize/protocol.py) by tests/router/test_quota_tokenize_vllm.py.

A count is exact only for the tokenizer that counted it, so a request is counted by every
distinct tokenizer that may serve it — each (model, engine, definition) among the ready
replicas of the model and its fallbacks — and reserved at the largest; a model of the chain
with no ready replica (on demand, starting), an engine that cannot count, a prompt with
images or audio, tools where llama.cpp would count them, or any failure gives no count, and
the byte bound stands. Counts are
cached per tokenizer and prompt (a bounded LRU), so a retried request costs nothing, and at
most `_MAX_ASKING` are asked at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import OrderedDict
from typing import Any

import aiohttp

from llmgw.router.engine_keys import EngineKeys
from llmgw.router.settings import RouterSettings
from llmgw.router.table import ModelEntry, ReplicaRuntime

log = logging.getLogger("llmgw.router")

_ENGINES = frozenset({"llamacpp", "vllm"})  # the engines whose tokenizers are asked (see above)
# The engines whose Responses API renders a text input as the chat messages below (vLLM 0.32.0:
# vllm/entrypoints/openai/responses/utils.py `construct_input_messages`).
_RESPONSES_ENGINES = frozenset({"vllm"})
_ROLES = frozenset({"system", "developer", "user", "assistant"})
# Chat request fields that change what the template renders or what is tokenized, sent to the
# tokenizer as the request carries them (vLLM's TokenizeChatRequest takes each, with the chat
# endpoint's defaults; llama.cpp's /apply-template reads what it knows of them).
_CHAT_KEEP = ("chat_template_kwargs", "add_generation_prompt", "continue_final_message", "add_special_tokens")
_CACHE = 4096  # counts kept, per router process
_MAX_COUNT = 1 << 30  # more is not an answer to believe
# Counts asked of engines at once, per router process: keys at their limit sending many
# distinct large prompts cost the engines a bounded amount of tokenizing (a wait for a
# turn counts against `tokenize_timeout`).
_MAX_ASKING = 4


def _text_only(messages: object) -> bool:
    """Messages whose content is text alone (a string, or parts of type text)."""
    if not isinstance(messages, list) or not messages:
        return False
    for m in messages:
        if not isinstance(m, dict):
            return False
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                return False
        elif content is not None and not isinstance(content, str):
            return False
    return True


def _responses_messages(req: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A Responses request's text input as the chat messages vLLM renders it as: `instructions`
    a system message, a string `input` a user message, input messages as they are (an
    assistant's content as its text). None for anything else (tools, items other than
    messages, a stored conversation to continue, `reasoning`, which its template reads too, an
    item with a `status`: a partial one is continued, not answered)."""
    if req.get("tools") or any(req.get(k) is not None for k in ("previous_response_id", "conversation", "reasoning")):
        return None
    out: list[dict[str, Any]] = []
    instructions = req.get("instructions")
    if instructions:
        if not isinstance(instructions, str):
            return None
        out.append({"role": "system", "content": instructions})
    given = req.get("input")
    if isinstance(given, str):
        return [*out, {"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        return None
    for item in given:
        if not isinstance(item, dict) or item.get("type", "message") != "message" or \
                item.get("role") not in _ROLES or "status" in item:
            return None
        content = item.get("content")
        if isinstance(content, list):  # input_text / output_text parts: their text, as a chat's text parts
            if not all(isinstance(p, dict) and p.get("type") in ("input_text", "output_text")
                       and isinstance(p.get("text"), str) for p in content):
                return None
            if item["role"] == "assistant":  # vLLM keeps an assistant's first part's text
                out.append({"role": "assistant", "content": content[0]["text"] if content else ""})
                continue
            content = [{"type": "text", "text": p["text"]} for p in content]
        elif not isinstance(content, str):
            return None
        out.append({"role": item["role"], "content": content})
    return out


def countable(req: dict[str, Any], path: str) -> dict[str, Any] | None:
    """What of `req` an engine's tokenizer counts (None: nothing it can count exactly)."""
    if path == "/v1/responses":
        messages = _responses_messages(req)
        if not messages:
            return None
        kwargs = req.get("chat_template_kwargs")
        return {"messages": messages, **({"chat_template_kwargs": kwargs} if kwargs is not None else {})}
    if path == "/v1/chat/completions":
        if not _text_only(req.get("messages")) or req.get("functions"):  # the legacy field: not counted
            return None
        keep = {"messages": req["messages"], **{k: req[k] for k in _CHAT_KEEP if req.get(k) is not None}}
        if req.get("tools"):  # rendered by the template: counted by the engines that take them
            keep["tools"] = req["tools"]
        return keep
    if path == "/v1/completions":
        prompt = req.get("prompt")
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                       and all(isinstance(p, str) for p in prompt)):
            return {"prompt": prompt}
    return None


def token_ids(req: dict[str, Any], path: str) -> int | None:
    """A `/v1/completions` prompt given as token ids counts itself: no engine to ask."""
    prompt = req.get("prompt") if path == "/v1/completions" else None
    if isinstance(prompt, list) and prompt:
        if all(type(t) is int for t in prompt):
            return len(prompt)
        if all(isinstance(p, list) and p and all(type(t) is int for t in p) for p in prompt):
            return sum(len(p) for p in prompt)
    return None


def tokenizer_of(replica: ReplicaRuntime) -> tuple[str, str, str, str]:
    """What names one tokenizer: the model, its engine, and what the replica was made from
    (its definition's hash covers the weights and the engine's arguments, a chat template among them)."""
    r = replica.record
    return (r.model, r.engine, r.spec_hash or r.profile, r.source or r.cache_name or "")


class PromptCounter:
    """Prompt counts per tokenizer, asked of ready replicas and cached."""

    def __init__(self, settings: RouterSettings, session: aiohttp.ClientSession, engine_keys: EngineKeys) -> None:
        self.settings = settings
        self.session = session
        self.engine_keys = engine_keys
        self.cache: OrderedDict[tuple[tuple[str, str, str, str], str], int] = OrderedDict()
        self.asked = 0  # counts asked of engines (not from the cache): what tests and the docs quote
        self._asking = asyncio.Semaphore(_MAX_ASKING)

    async def count(self, chain: list[ModelEntry], req: dict[str, Any], path: str) -> int | None:
        """The prompt's tokens by the largest count of any tokenizer that may serve it (the
        replicas of `chain`: the model and its fallbacks, as the request will walk them);
        None when any of them cannot say (the caller keeps its byte bound)."""
        ids = token_ids(req, path)
        if ids is not None:
            return ids
        what = countable(req, path)
        if what is None:
            return None
        digest = hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        asks: dict[tuple[str, str, str, str], ReplicaRuntime] = {}
        now = time.monotonic()
        for target in chain:
            ready = [r for r in target.replicas if r.state == "ready"]
            engines = _RESPONSES_ENGINES if path == "/v1/responses" else _ENGINES
            if not ready or any(r.record.engine not in engines for r in ready):
                return None
            for r in sorted(ready, key=lambda r: not r.routable(now)):  # one not ejected, where there is one
                asks.setdefault(tokenizer_of(r), r)
        counts = await asyncio.gather(*(self._cached(tok, r, what, digest) for tok, r in asks.items()))
        if not counts or any(c is None for c in counts):
            return None
        return max(c for c in counts if c is not None)

    async def _cached(self, tok: tuple[str, str, str, str], replica: ReplicaRuntime, what: dict[str, Any],
                      digest: str) -> int | None:
        key = (tok, digest)
        hit = self.cache.get(key)
        if hit is not None:
            self.cache.move_to_end(key)
            return hit
        n = await self._ask(replica, what)
        if n is not None:
            self.cache[key] = n
            while len(self.cache) > _CACHE:
                self.cache.popitem(last=False)
        return n

    async def _ask(self, replica: ReplicaRuntime, what: dict[str, Any]) -> int | None:
        self.asked += 1
        try:
            async with asyncio.timeout(self.settings.tokenize_timeout), self._asking:
                if replica.record.engine == "vllm":
                    return await self._ask_vllm(replica, what)
                if "tools" in what:  # its /apply-template renders tools only with --jinja: not asked
                    return None
                prompts: list[str]
                if "messages" in what:
                    rendered = await self._post(replica, "/apply-template", what)
                    text = rendered.get("prompt") if isinstance(rendered, dict) else None
                    if not isinstance(text, str):
                        return None
                    prompts = [text]
                else:
                    p = what["prompt"]
                    prompts = [p] if isinstance(p, str) else list(p)
                total = 0
                for text in prompts:
                    got = await self._post(replica, "/tokenize",
                                           {"content": text, "add_special": True, "parse_special": True})
                    tokens = got.get("tokens") if isinstance(got, dict) else None
                    if not isinstance(tokens, list):
                        return None
                    total += len(tokens)
                return total if total <= _MAX_COUNT else None
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            log.info("replica %s could not count a prompt (%s: %s); its byte bound stands",
                     replica.id, type(exc).__name__, exc)
            return None

    async def _ask_vllm(self, replica: ReplicaRuntime, what: dict[str, Any]) -> int | None:
        """vLLM's /tokenize: the chat as its chat endpoint renders it, or each prompt apart."""
        bodies: list[dict[str, Any]]
        if "messages" in what:
            bodies = [{"model": replica.model, **what}]
        else:
            p = what["prompt"]
            bodies = [{"model": replica.model, "prompt": text} for text in ([p] if isinstance(p, str) else p)]
        total = 0
        for body in bodies:
            got = await self._post(replica, "/tokenize", body)
            n = got.get("count") if isinstance(got, dict) else None
            if type(n) is not int or n < 0:
                return None
            total += n
        return total if total <= _MAX_COUNT else None

    async def _post(self, replica: ReplicaRuntime, path: str, body: dict[str, Any]) -> Any:
        headers = self.engine_keys.authorize(replica.id, {"Content-Type": "application/json"})
        async with self.session.post(replica.endpoint + path, data=json.dumps(body).encode(),
                                     headers=headers) as resp:
            if resp.status != 200:
                raise ValueError(f"{path} answered {resp.status}")
            return await resp.json(content_type=None)
