"""Requests a replica's engine runs at once, from its command line (llmgw.engines.max_running):
the number apply records and the router's admission holds a vLLM or SGLang replica to.

The defaults are the pinned versions' own (cited in llmgw/engines/vllm.py and sglang.py); the
CPU one is asked of the pinned vLLM itself in tests/router/test_quota_tokenize_vllm.py."""

from __future__ import annotations

import pytest

from llmgw.engines import MAX_RUNNING_MOST, Device, max_running
from llmgw.engines.flags import arg_value, int_value

H100 = Device("NVIDIA H100 80GB HBM3", 81559)
A100 = Device("NVIDIA A100-SXM4-80GB", 81920)
L40S = Device("NVIDIA L40S", 46068)
B200 = Device("NVIDIA B200", 183359)


def test_the_last_spelling_of_a_flag_wins() -> None:
    args = ["--max-num-seqs", "8", "--dtype", "half", "--max-num-seqs=16"]
    assert arg_value(args, "--max-num-seqs") == "16"
    assert int_value(args, "--max-num-seqs") == 16
    assert arg_value(["--max-num-seqs"], "--max-num-seqs") is None  # no value after it
    # Not a positive integer: no number (the engine refuses such a command line itself).
    for bad in ("0", "-3", "eight", "1.5", "٣", ""):
        assert int_value(["--max-num-seqs", bad], "--max-num-seqs") is None, bad


@pytest.mark.parametrize(("args", "gpus", "nodes", "device", "want"), [
    ((), 0, 1, None, 128),  # the CPU build: 128 per rank of the world
    ((), 1, 1, H100, 1024),
    ((), 8, 2, H100, 1024),
    ((), 8, 1, B200, 1024),
    ((), 4, 1, A100, 256),  # an A100 keeps the smaller default whatever its memory
    ((), 2, 1, L40S, 256),
    ((), 1, 1, None, 1024),  # a GPU the facts do not describe: the largest default, never below the engine's
    ((), 1, 1, Device("NVIDIA H100", None), 1024),
    (("--max-num-seqs", "64"), 1, 1, H100, 64),
    (("--max-num-seqs=64",), 0, 1, None, 64),
    (("--max_num_seqs", "12"), 0, 1, None, 12),  # vLLM turns underscores into dashes
    (("--performance-mode", "throughput"), 1, 1, A100, 512),  # doubles a default...
    (("--performance-mode", "throughput", "--max-num-seqs", "10"), 1, 1, A100, 10),  # ...not a set value
    (("--max-num-batched-tokens", "100"), 1, 1, H100, 100),  # caps a default
    (("--max-num-batched-tokens", "100", "--max-num-seqs", "300"), 1, 1, H100, 300),
    (("--max-num-seqs", "300", "--max-num-active-seqs", "40"), 1, 1, H100, 40),  # what may be running
    (("--max-num-seqs", "999999"), 1, 1, H100, MAX_RUNNING_MOST),  # the state's bound
])
def test_vllm_runs_its_max_num_seqs_or_its_default_for_the_device(
        args: tuple[str, ...], gpus: int, nodes: int, device: Device | None, want: int) -> None:
    assert max_running("vllm", args, gpus=gpus, nodes=nodes, device=device) == want


def test_sglang_runs_its_max_running_requests_and_llama_cpp_says_its_own() -> None:
    assert max_running("sglang", ["--max-running-requests", "32"], gpus=8, nodes=2, device=H100) == 32
    # Its default is sized from the KV cache it finds room for at start: not known before.
    assert max_running("sglang", ["--mem-fraction-static", "0.8"], gpus=8, nodes=1, device=H100) is None
    # llama.cpp's --parallel is llmgw's own and the router reads it from /props (router/slots.py).
    assert max_running("llamacpp", [], gpus=0, nodes=1) is None
