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
