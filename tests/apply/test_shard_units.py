"""Engine command lines for every engine, single- and multi-node, by rendering the role's
unit template as the role does (these machines have no GPUs to run vLLM or SGLang on).
The words come from llmgw.engines (tests/engines checks each shape alone and against the
engines' own parsers); here: that the template quotes them whole, with the unit around.

Each rendered unit is also checked by `systemd-analyze verify`, as the role's
`validate:` does before installing one.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.ansible import ansible_env, playbook

HERE = Path(__file__).resolve().parent
ROLE = HERE.parents[1] / "roles" / "llmgw_engine"

LEADER, WORKER = "10.0.0.1", "10.0.0.2"
MGMT = "192.0.2.7"  # the rendering host's management address: every engine binds to it alone
SG_KEY = "llmgw-engine-" + "s" * 40


def shard(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"unit": "llmgw-big-1-0", "replica": "big-1", "model": "big", "engine": "vllm",
                            "model_path": "/var/cache/llmgw/abc-model", "port": 20000, "gpus": [0, 1, 2, 3]}
    return {**base, **kw}


PEERS2 = [f"{LEADER}:20000", f"{WORKER}:20004"]
FABRIC = {"nodes": 2, "leader": LEADER, "peers": PEERS2, "fabric": "fab-a", "ib_hcas": ["mlx5_0", "mlx5_1"],
          "socket_ifname": "eth0"}
SG_PEERS = [f"{LEADER}:20010", f"{WORKER}:20010"]
RPC_PEERS = [f"{LEADER}:20000", f"{WORKER}:20001", "10.0.0.3:20002"]
LLAMA = {"engine": "llamacpp", "gpus": [], "model": "tiny", "replica": "tiny-1", "args": ["--ctx-size", "2048"]}
SHARDS = [
    shard(),
    shard(unit="llmgw-big-2-0", replica="big-2", **FABRIC),
    shard(unit="llmgw-big-2-1", replica="big-2", rank=1, port=20004, gpus=[4, 5, 6, 7], **FABRIC),
    shard(unit="llmgw-sg-1-0", replica="sg-1", engine="sglang", port=20020, gpus=[0, 1]),
    shard(unit="llmgw-sg-2-0", replica="sg-2", engine="sglang", port=20010, nodes=2, leader=LEADER, peers=SG_PEERS),
    shard(unit="llmgw-sg-2-1", replica="sg-2", engine="sglang", port=20010, rank=1, nodes=2, leader=LEADER,
          peers=SG_PEERS),
    shard(unit="llmgw-tiny-9-0", **{**LLAMA, "replica": "tiny-9"}, port=20009),
    shard(unit="llmgw-tiny-1-0", **LLAMA, nodes=3, leader=LEADER, peers=RPC_PEERS),
    shard(unit="llmgw-tiny-1-1", **LLAMA, rank=1, nodes=3, port=20001, leader=LEADER, peers=RPC_PEERS),
    shard(unit="llmgw-ds-1-0", replica="ds-1", engine="sglang", port=20030, gpus=[0], trust_remote_code=True),
    # LoRA adapters loaded at run time by the router (adapter_loading: runtime, docs/adapters.md).
    shard(unit="llmgw-lora-1-0", replica="lora-1", port=20040, gpus=[0], max_loras=2,
          adapters=[{"name": "big-sql", "path": "/var/cache/llmgw/def-sql", "rank": 8},
                    {"name": "big-poet", "path": "/var/cache/llmgw/012-poet", "rank": 16}]),
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every shard above, rendered in one Ansible run."""
    out = tmp_path_factory.mktemp("units")
    return out, render(out, SHARDS)


def render(tmp: Path, shards: list[dict[str, Any]]) -> dict[str, str]:
    playbook(HERE / "render_units.yml",
             {"shards": shards, "out_dir": str(tmp), "llmgw_mgmt_address": MGMT,
              "llmgw_engine_api_keys": {"llmgw-sg-1-0": SG_KEY, "llmgw-tiny-9-0": SG_KEY}},
             env=ansible_env(ANSIBLE_FILTER_PLUGINS=str(ROLE / "filter_plugins")))
    return {p.stem: p.read_text() for p in tmp.glob("*.service")}


def exec_start(unit: str) -> list[str]:
    """ExecStart's words, with systemd's line continuations joined."""
    text = unit.replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def env_of(unit: str) -> dict[str, str]:
    out = {}
    for ln in unit.splitlines():
        if ln.startswith("Environment="):
            k, _, v = shlex.split(ln.removeprefix("Environment="))[0].partition("=")
            out[k] = v
    return out


def after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def verify(tmp: Path, name: str) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing on this machine (Debian package systemd)")
    done = subprocess.run(["systemd-analyze", "verify", str(tmp / f"{name}.service")], capture_output=True,
                          text=True, check=False)
    problems = [ln for ln in done.stderr.splitlines() if f"{name}.service" in ln and "Command" not in ln]
    assert not problems, done.stderr


def test_vllm_single_node(rendered: tuple[Path, dict[str, str]]) -> None:
    tmp_path, units = rendered
    words, env = exec_start(units["llmgw-big-1-0"]), env_of(units["llmgw-big-1-0"])
    assert words[:5] == ["/opt/llmgw/engines/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                         "--model", "/var/cache/llmgw/abc-model"]
    assert after(words, "--tensor-parallel-size") == "4" and after(words, "--served-model-name") == "big"
    assert after(words, "--port") == "20000"
    assert "--nnodes" not in words and "--headless" not in words
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["PYTHONUNBUFFERED"] == "1"  # its log reaches the journal as it starts
    assert "NCCL_IB_HCA" not in env
    verify(tmp_path, "llmgw-big-1-0")


def test_vllm_loading_adapters_at_run_time_has_its_load_api_on_in_the_environment(
        rendered: tuple[Path, dict[str, str]]) -> None:
    tmp_path, units = rendered
    words, env = exec_start(units["llmgw-lora-1-0"]), env_of(units["llmgw-lora-1-0"])
    assert "--lora-modules" not in words and "--enable-lora" in words
    assert after(words, "--max-loras") == "2" and after(words, "--max-lora-rank") == "16"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"  # an Environment= value, never a shell word
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env_of(units["llmgw-big-1-0"])
    verify(tmp_path, "llmgw-lora-1-0")


def test_vllm_two_nodes_with_fabric(rendered: tuple[Path, dict[str, str]]) -> None:
    tmp_path, units = rendered
    lead, work = exec_start(units["llmgw-big-2-0"]), exec_start(units["llmgw-big-2-1"])
    for words, rank in ((lead, "0"), (work, "1")):
        assert after(words, "--tensor-parallel-size") == "4"
        assert after(words, "--pipeline-parallel-size") == "2" and after(words, "--nnodes") == "2"
        assert after(words, "--node-rank") == rank
        assert after(words, "--master-addr") == LEADER and after(words, "--master-port") == "30000"
    assert "--headless" not in lead and "--headless" in work
    env = env_of(units["llmgw-big-2-1"])
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "# fabric: fab-a" in units["llmgw-big-2-0"]
    verify(tmp_path, "llmgw-big-2-1")


def test_sglang_single_and_two_nodes(rendered: tuple[Path, dict[str, str]]) -> None:
    tmp_path, units = rendered
    one = exec_start(units["llmgw-sg-1-0"])
    assert one[:3] == ["/opt/llmgw/engines/sglang/bin/python", "-m", "sglang.launch_server"]
    assert after(one, "--tp") == "2" and after(one, "--model-path") == "/var/cache/llmgw/abc-model"
    assert "--nnodes" not in one
    for name, rank in (("llmgw-sg-2-0", "0"), ("llmgw-sg-2-1", "1")):
        words = exec_start(units[name])
        assert after(words, "--tp") == "8"  # every GPU of the replica, across nodes
        assert after(words, "--nnodes") == "2" and after(words, "--node-rank") == rank
        assert after(words, "--dist-init-addr") == f"{LEADER}:30010"
        verify(tmp_path, name)


def test_llamacpp_single_node_and_rpc_workers(rendered: tuple[Path, dict[str, str]]) -> None:
    tmp_path, units = rendered
    single = exec_start(units["llmgw-tiny-9-0"])
    assert single[0] == "/opt/llmgw/engines/llamacpp/0123456789abcdef/llama-server"
    assert after(single, "--alias") == "tiny" and "--rpc" not in single and "--metrics" in single
    assert single[-2:] == ["--ctx-size", "2048"]
    lead = exec_start(units["llmgw-tiny-1-0"])
    assert after(lead, "--rpc") == f"{WORKER}:20001,10.0.0.3:20002"
    worker = exec_start(units["llmgw-tiny-1-1"])
    assert worker == ["/opt/llmgw/engines/llamacpp/0123456789abcdef/rpc-server", "--host", MGMT,
                      "--port", "20001"]
    unit = units["llmgw-tiny-1-1"]
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "LimitMEMLOCK=infinity",
                 "Restart=on-failure", "DynamicUser=yes", "User=llmgw-tiny-1-1", "SyslogIdentifier=llmgw-tiny-1-1",
                 "LimitNOFILE=65536"):
        assert line in unit.splitlines()
    assert "CUDA_VISIBLE_DEVICES" not in env_of(unit)
    verify(tmp_path, "llmgw-tiny-1-0")


def test_every_engine_binds_to_the_management_address_only(rendered: tuple[Path, dict[str, str]]) -> None:
    _, units = rendered
    for name, unit in units.items():
        words = exec_start(unit)
        assert after(words, "--host") == MGMT, name
        assert "0.0.0.0" not in unit, name


def test_sglang_reads_its_key_from_a_file_of_options_never_its_command_line(
        rendered: tuple[Path, dict[str, str]]) -> None:
    _, units = rendered
    keyed = exec_start(units["llmgw-sg-1-0"])
    # The unit's own copy of the root-only file (LoadCredential=), readable by its user alone.
    assert after(keyed, "--config") == "/run/credentials/llmgw-sg-1-0.service/key.yaml"
    assert "LoadCredential=key.yaml:/etc/llmgw/engine-keys/llmgw-sg-1-0.yaml" in units["llmgw-sg-1-0"].splitlines()
    assert "--api-key" not in keyed
    assert "--config" not in exec_start(units["llmgw-sg-2-1"])  # no key given: none named
    llama = units["llmgw-tiny-9-0"]  # llama.cpp reads its key from the environment file
    assert "--config" not in exec_start(llama)
    assert "EnvironmentFile=-/etc/llmgw/engine-keys/llmgw-tiny-9-0.env" in llama.splitlines()
    for unit in units.values():
        assert SG_KEY not in unit


def test_trust_remote_code_comes_from_the_shard_entry_once(rendered: tuple[Path, dict[str, str]]) -> None:
    tmp_path, units = rendered
    assert exec_start(units["llmgw-ds-1-0"]).count("--trust-remote-code") == 1
    assert all("--trust-remote-code" not in exec_start(u) for name, u in units.items() if name != "llmgw-ds-1-0")
    verify(tmp_path, "llmgw-ds-1-0")
