"""LoRA adapters on each engine's command line (docs/adapters.md). The engines' own parsers
check these lines too: tests/engines/shapes.py has an `+adapters` shape of each, which
test_parsers.py feeds to vLLM's and SGLang's parsers and llama-server's `--help`."""

from __future__ import annotations

import dataclasses

import pytest

from llmgw.engines import ShardAdapter, command, environment
from llmgw.engines.entry import check_entry
from llmgw.engines.shard import Shard
from tests.engines.shapes import ADAPTERS, LAYOUT, shards


def test_llamacpp_loads_each_adapter_in_order_so_ids_follow_the_catalog() -> None:
    words = command(shards("llamacpp")["cpu +adapters"], LAYOUT)
    loras = [words[i + 1] for i, w in enumerate(words) if w == "--lora"]
    assert loras == [",".join(a.path for a in ADAPTERS)]


def test_llamacpp_rpc_workers_take_no_adapters() -> None:
    words = command(shards("llamacpp")["2-nodes-rank-1 +adapters"], LAYOUT)
    assert words[0].endswith("/rpc-server") and "--lora" not in words


def test_vllm_serves_each_adapter_under_its_name_with_slots_for_its_rank() -> None:
    words = command(shards("vllm")["one-gpu +adapters"], LAYOUT)
    i = words.index("--lora-modules")
    assert words[i + 1:i + 3] == ["tiny-sql=/var/cache/llmgw/4567cdef-tiny-sql",
                                  "tiny-poet=/var/cache/llmgw/89abef01-tiny-poet"]
    assert "--enable-lora" in words
    assert words[words.index("--max-loras") + 1] == "2"
    assert words[words.index("--max-lora-rank") + 1] == "8"


def test_vllm_rounds_the_rank_up_to_one_it_serves_and_refuses_one_too_large() -> None:
    s = dataclasses.replace(shards("vllm")["one-gpu"], adapters=(ShardAdapter("a", "/var/cache/llmgw/a", 12),))
    words = command(s, LAYOUT)
    assert words[words.index("--max-lora-rank") + 1] == "16"
    with pytest.raises(ValueError, match="rank 1024 is larger than vLLM serves"):
        command(dataclasses.replace(s, adapters=(ShardAdapter("a", "/var/cache/llmgw/a", 1024),)), LAYOUT)


def test_vllm_without_adapters_has_no_lora_flags() -> None:
    assert not any("lora" in w for w in command(shards("vllm")["one-gpu"], LAYOUT))


def test_vllm_loading_at_run_time_starts_with_none_and_room_for_max_loras() -> None:
    s = shards("vllm")["one-gpu +runtime-adapters"]
    words = command(s, LAYOUT)
    assert "--lora-modules" not in words and "--enable-lora" in words
    assert words[words.index("--max-loras") + 1] == "1"
    assert words[words.index("--max-lora-rank") + 1] == "8"  # sized for every adapter it may load
    # Its load API on, as an Environment= value of the unit; nothing for adapters loaded at start.
    assert environment(s) == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    assert environment(shards("vllm")["one-gpu +adapters"]) == {}


def test_run_time_loading_is_refused_on_an_engine_that_loads_only_at_start() -> None:
    entry = {"engine": "llamacpp", "model": "tiny", "model_path": "/var/cache/llmgw/x", "port": 20000,
             "unit": "llmgw-x", "replica": "tiny-1", "lineage": "", "state": "present", "max_loras": 2,
             "adapters": [{"name": "a", "path": "/var/cache/llmgw/y"}]}
    assert "max_loras: llmgw loads LoRA adapters into llama.cpp only at start; set 0" in check_entry(entry)
    assert not [p for p in check_entry({**entry, "engine": "vllm"}) if "max_loras" in p]
    assert Shard.from_entry({**entry, "engine": "vllm"}).max_loras == 2
    with pytest.raises(ValueError, match="max_loras must be a whole number >= 0"):
        Shard.from_entry({**entry, "max_loras": True})


def test_sglang_serves_each_adapter_under_its_name() -> None:
    words = command(shards("sglang")["one-gpu +adapters"], LAYOUT)
    i = words.index("--lora-paths")
    assert words[i + 1:i + 3] == ["tiny-sql=/var/cache/llmgw/4567cdef-tiny-sql",
                                  "tiny-poet=/var/cache/llmgw/89abef01-tiny-poet"]
    assert words[words.index("--max-loras-per-batch") + 1] == "2"


def test_a_shard_entry_hands_its_adapters_over() -> None:
    entry = {"engine": "llamacpp", "model": "tiny", "model_path": "/var/cache/llmgw/x", "port": 20000,
             "adapters": [{"name": "tiny-sql", "path": "/var/cache/llmgw/y", "rank": 8}]}
    assert Shard.from_entry(entry).adapters == (ShardAdapter("tiny-sql", "/var/cache/llmgw/y", 8),)
    with pytest.raises(ValueError, match="rank must be a positive whole number"):
        Shard.from_entry({**entry, "adapters": [{"name": "a", "path": "/p", "rank": True}]})


@pytest.mark.parametrize(("adapter", "why"), [
    ({"name": "Bad Name", "path": "/var/cache/llmgw/y"}, "adapters[0].name 'Bad Name' does not match"),
    ({"name": "a", "path": "/var/cache/llmgw/../etc"}, "adapters[0].path '/var/cache/llmgw/../etc' is not"),
    ({"name": "a", "path": "/var/cache/llmgw/y", "rank": 0}, "adapters[0].rank 0 is not a positive"),
    ({"name": "a=b", "path": "/var/cache/llmgw/y"}, "adapters[0].name 'a=b' does not match"),
])
def test_the_host_refuses_an_adapter_that_is_not_shaped_as_llmgw_writes_it(adapter: dict[str, object],
                                                                             why: str) -> None:
    entry = {"engine": "vllm", "model": "tiny", "model_path": "/var/cache/llmgw/x", "port": 20000, "unit": "llmgw-x",
             "replica": "tiny-1", "lineage": "", "state": "present", "adapters": [adapter]}
    assert any(p.startswith(why) for p in check_entry(entry)), check_entry(entry)
