"""The engine role's host preflight refuses every control character in args and env (NUL
included), not only newlines: a NUL in an Environment= value ends the line for systemd's
parser and the rest becomes new directives. Run through llmgw.runner (real ansible-runner)
with the real role."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmgw.runner import run_playbook

HERE = Path(__file__).resolve().parent


def _shard(**kw: object) -> dict[str, object]:
    return {"unit": "llmgw-x-1-0", "replica": "x-1", "model": "x", "engine": "vllm",
            "model_path": "/srv/models/x", "port": 20000, "gpus": [0], **kw}


@pytest.mark.parametrize("bad", [{"env": {"A": "x\x00ExecStartPre=/bin/id"}}, {"args": ["--a", "b\x1bc"]},
                                 {"env": {"A": "x\x7f"}}, {"args": ["x\ty"]}])
def test_preflight_refuses_control_characters(tmp_path: Path, bad: dict[str, object]) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    result = run_playbook(HERE / "preflight.yml", inv, extravars={"shards": [_shard(**bad)]})
    assert not result.ok
    assert "no control characters in args or env" in "\n".join(result.output_tail), result.output_tail


def test_preflight_passes_a_clean_shard(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    result = run_playbook(HERE / "preflight.yml", inv,
                          extravars={"shards": [_shard(env={"VLLM_LOGGING_LEVEL": "b c"},
                                                       args=["--max-model-len", "y z"])]})
    assert result.ok, result.host_errors


def test_preflight_passes_a_shard_as_apply_writes_it(tmp_path: Path) -> None:
    """Control, in the shape apply's executor writes (`_shard_entry`): an empty fabric, no
    adapters, a lineage, an arg that YAML reads as a number. The role's argument spec hands an
    empty optional string over as null; refusing that refused every single-node shard."""
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    shard = _shard(gpus=[], state="present", lineage="34e197d3-cae7-435b-9872-63f5e20c8b48",
                   rank=0, nodes=1, leader="192.0.2.1", peers=["192.0.2.1:20000"], fabric="", ib_hcas=[],
                   args=["--max-model-len", "2048"], env={}, trust_remote_code=False)
    result = run_playbook(HERE / "preflight.yml", inv, extravars={"shards": [shard]})
    assert result.ok, result.host_errors
