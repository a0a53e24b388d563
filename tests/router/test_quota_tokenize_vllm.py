"""Exact prompt counts and slots against a real vLLM (its CPU build, the tiny HF Llama).

- Near a token limit the router counts a prompt with vLLM's own /tokenize (the request shape of
  the pinned vLLM: the chat's messages, tools and template flags; each completion prompt apart),
  and the count is what vLLM then charges: a prompt whose exact count is the group's whole
  limit is admitted, one token over is refused, where the byte bound refuses both.
- vLLM runs at most `--max-num-seqs` sequences at once and says so nowhere the router can ask:
  apply records it with the replica (llmgw.engines.max_running, from the shard's arguments or
  the pinned version's default for its device), and the router's admission holds the rest.

One vLLM start (about a minute on a quiet machine, several on a busy one; about 3 GB).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmgw.engines import Shard, max_running
from llmgw.store import Store
from tests.support.net import free_port
from tests.support.router import CLIENTS, FAST, RunningRouter, StateFile, model, replica
from tests.support.tenant_load import load, queue_length
from tests.support.vllm import ARGS, VENV, serve_vllm, tiny_model
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

SEQS = 2  # the shard's --max-num-seqs: what the router must hold the replica to
MAX_TOKENS = 4
# Words the tiny tokenizer learnt whole (scripts/make_tiny_hf_llama.py trains on them): about
# six bytes a token, so the byte bound is well above the exact count.
TEXT = "hello world this is a tiny model for tests " * 10


@dataclasses.dataclass
class Served:
    endpoint: str
    args: tuple[str, ...]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    d = tmp_path_factory.mktemp("vllm-tokenize")
    args = (*ARGS, "--max-num-seqs", str(SEQS))
    shard = Shard(engine="vllm", model="tiny-hf", model_path=tiny_model(d), port=free_port(), args=args)
    with serve_vllm(shard, d) as endpoint:
        yield Served(endpoint, args)


@pytest.fixture
def fleet(served: Served, state: StateFile) -> StateFile:
    # The replica as apply records it: its slots from the shard's command line (a CPU shard, one node).
    r = replica("tiny-hf-1", "tiny-hf", served.endpoint).model_copy(update={
        "engine": "vllm", "max_running": max_running("vllm", served.args, gpus=0, nodes=1)})
    state.write([model("tiny-hf")], [r])
    return state


def _direct(served: Served) -> openai.OpenAI:
    c = openai.OpenAI(base_url=served.endpoint + "/v1", api_key="direct", max_retries=0, timeout=120)
    CLIENTS.append(c)
    return c


def _body_bytes(req: dict[str, Any]) -> int:
    return len(json.dumps({"model": "tiny-hf", **req}).encode())


# Requests near a limit: a chat, a chat with tools (the tiny template ignores them: vLLM must
# still take them in /tokenize), a chat that continues its last message, and a completion of
# two prompts (vLLM's /tokenize takes one prompt at a time).
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "find a word",
                                           "parameters": {"type": "object", "properties": {}}}}]
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("chat", {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": TEXT}]}),
    # tool_choice none: without a tool parser vLLM refuses `auto`; the template renders the tools still.
    "tools": ("chat", {"messages": [{"role": "user", "content": TEXT}], "tools": TOOLS, "tool_choice": "none"}),
    "continue": ("chat", {"messages": [{"role": "user", "content": TEXT}, {"role": "assistant", "content": "the"}],
                          "add_generation_prompt": False, "continue_final_message": True}),
    "prompts": ("completions", {"prompt": [TEXT, "hello world " * 20]}),
    # The Responses API: its text input counted as the chat messages vLLM renders it as.
    "responses": ("responses", {"instructions": "be brief", "input": TEXT}),
    "responses-parts": ("responses", {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": TEXT}, {"type": "input_text", "text": "tiny"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": "this is a test"}]}),
}


def _create(client: openai.OpenAI, kind: str, req: dict[str, Any]) -> Any:
    if kind == "chat":
        extra = {k: req[k] for k in ("add_generation_prompt", "continue_final_message") if k in req}
        return client.chat.completions.create(model="tiny-hf", messages=req["messages"],
                                              tools=req.get("tools", openai.omit),
                                              tool_choice=req.get("tool_choice", openai.omit), max_tokens=MAX_TOKENS,
                                              temperature=0, extra_body=extra or None)
    if kind == "responses":
        return client.responses.create(model="tiny-hf", input=req["input"], instructions=req.get("instructions"),
                                       max_output_tokens=MAX_TOKENS, temperature=0, store=False)
    return client.completions.create(model="tiny-hf", prompt=req["prompt"], max_tokens=MAX_TOKENS, temperature=0)


def _prompt_tokens(resp: Any) -> int:
    usage = resp.usage
    return int(usage.input_tokens if hasattr(usage, "input_tokens") else usage.prompt_tokens)


@pytest.mark.parametrize("name", REQUESTS)
def test_a_prompt_at_its_limit_is_admitted_by_vllms_count_and_one_over_refused(
        name: str, served: Served, fleet: StateFile, start_router: Callable[..., RunningRouter],
        sqlite_store: Store) -> None:
    kind, req = REQUESTS[name]
    exact = _prompt_tokens(_create(_direct(served), kind, req))  # what vLLM charges for this prompt
    budget = "max_output_tokens" if kind == "responses" else "max_tokens"
    body = _body_bytes({**req, budget: MAX_TOKENS, "temperature": 0})
    print(f"\n{name}: {body} body bytes, {exact} tokens by vLLM ({body / exact:.1f} bytes a token)")
    assert body > exact + 1  # the byte bound refuses it under either limit below

    rr = start_router(fleet.path, settings=dataclasses.replace(FAST, first_byte_timeout=120))
    counter = rr.server.router.proxy.counter  # type: ignore[union-attr]
    quotas = rr.server.router.quotas  # type: ignore[union-attr]
    sqlite_store.set_group("at", tokens_per_day=exact)  # the whole limit is the prompt: it fits
    sqlite_store.set_group("over", tokens_per_day=exact - 1)  # a token short
    at = rr.client(sqlite_store.create_key("at-key", "at")[1], timeout=120)
    over = rr.client(sqlite_store.create_key("over-key", "over")[1], timeout=120)

    got = _create(at, kind, req)
    assert _prompt_tokens(got) == exact
    assert quotas.exact_admits == 1 and counter.asked >= 1
    # The router's count (what it reserved) is the engine's own.
    assert list(counter.cache.values()) == [exact]

    with pytest.raises(openai.RateLimitError) as refused:
        _create(over, kind, req)
    assert refused.value.code == "insufficient_quota"
    assert quotas.exact_admits == 1  # counted (from the cache) and refused by the count


def test_the_router_holds_a_vllm_replica_to_its_max_num_seqs(
        served: Served, fleet: StateFile, start_router: Callable[..., RunningRouter], api_key: str) -> None:
    rr = start_router(fleet.path, settings=dataclasses.replace(FAST, first_byte_timeout=120, queue_timeout=120))
    admission = rr.server.router.admission  # type: ignore[union-attr]
    assert admission.capacity("tiny-hf") == SEQS  # from the state's record: vLLM answers no /props
    with load(rr.base_url, api_key, 3 * SEQS, words=40, max_tokens=16, model="tiny-hf") as results:
        wait_until(lambda: queue_length(rr.admin_url, "-", model="tiny-hf") >= 1, 120,
                   f"requests waiting in the router beyond {SEQS} in flight")
        # Twenty looks at both sides while the queue lasts: never more than SEQS in flight.
        seen: list[tuple[int, float, float, float]] = []

        def look() -> bool:
            seen.append((sum(r["in_flight"] for r in rr.admin("/api/v1/replicas")["replicas"]),
                         queue_length(rr.admin_url, "-", model="tiny-hf"),
                         _vllm_gauge(served.endpoint, "vllm:num_requests_running"),
                         _vllm_gauge(served.endpoint, "vllm:num_requests_waiting")))
            return len(seen) >= 20

        wait_until(look, 120, "twenty looks at the router and at vLLM")
        print(f"\nmost at once: router in flight {max(x[0] for x in seen)}, router queue {max(x[1] for x in seen)}, "
              f"vLLM running {max(x[2] for x in seen)}, vLLM waiting {max(x[3] for x in seen)}")
        assert max(x[0] for x in seen) <= SEQS and max(x[2] for x in seen) <= SEQS
    assert results and all(t.status == 200 for t in results)
    assert any(t.queue_ms for t in results)  # some waited in the router, not in vLLM


def _vllm_gauge(endpoint: str, name: str) -> float:
    lines = [line for line in httpx.get(endpoint + "/metrics", timeout=10).text.splitlines()
             if line.startswith(name + "{")]
    assert lines, f"vLLM's /metrics has no {name}"
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_the_declared_cpu_default_is_the_pinned_vllms_own() -> None:
    """vLLM's CPU default for --max-num-seqs, asked of the pinned version's own code (its
    EngineArgs.get_batch_defaults on this CPU), is what llmgw.engines.vllm declares."""
    code = ("from vllm.engine.arg_utils import EngineArgs; from vllm.usage.usage_lib import UsageContext; "
            "print(EngineArgs.get_batch_defaults(1)[1][UsageContext.OPENAI_API_SERVER])")
    python = Path(VENV) / "bin" / "python"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True, timeout=600)
    assert int(out.stdout.strip().splitlines()[-1]) == max_running("vllm", ARGS, gpus=0, nodes=1)
