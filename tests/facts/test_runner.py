"""llmgw.runner against real playbooks on this machine (local connection) and a host that is not there.

Also the ad-hoc form the issue asks for: `ansible localhost -m llmgw.cluster.node_facts`
with the collection path llmgw configures returns this machine's real MemTotal and
filesystems, and `gpu_facts` returns no GPUs with the reason, exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from llmgw import ansible_content
from llmgw.errors import RunnerError
from llmgw.runner import RunEvent, ansible_env, run_playbook

PY = sys.executable
VENV_BIN = Path(PY).parent


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(f"[nodes]\nhere-1 ansible_connection=local ansible_python_interpreter={PY}\n"
                    f"here-2 ansible_connection=local ansible_python_interpreter={PY}\n"
                    "gone ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh\n")
    return path


PLAYBOOK = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: node facts
      llmgw.cluster.node_facts:
        model_dirs: ["{{ model_dir }}"]
    - name: fail on here-2 only
      ansible.builtin.fail:
        msg: "here-2 says no"
      when: inventory_hostname == 'here-2'
    - name: touch a file
      ansible.builtin.file:
        path: "{{ model_dir }}/touched-{{ inventory_hostname }}"
        state: touch
        mode: "0644"
"""


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR of this test only, to see the runner's private folder go away."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


def test_run_a_real_playbook(tmp_path: Path, private_tmp: Path) -> None:
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK)
    events: list[RunEvent] = []
    result = run_playbook(book, inventory(tmp_path), extravars={"model_dir": str(tmp_path)}, forks=3,
                          capture=["node facts", "ansible.builtin.file"], on_event=events.append)

    assert result.status == "failed" and result.rc != 0 and not result.ok
    assert result.hosts == ["gone", "here-1", "here-2"]
    assert result.stats["here-1"].ok == 2 and result.stats["here-1"].changed == 1
    assert result.stats["here-1"].skipped == 1
    assert result.stats["here-2"].failed == 1 and result.stats["gone"].unreachable == 1
    assert result.failed == ["here-2"] and result.unreachable == ["gone"]
    assert result.host_errors["here-2"] == "failed: here-2 says no"
    assert result.host_errors["gone"].startswith("unreachable: Failed to connect to the host via ssh")
    assert "here-1" not in result.host_errors

    facts = result.results["here-1"]["node facts"]
    assert facts.status == "ok" and facts.action == "llmgw.cluster.node_facts"
    assert facts.facts["llmgw_filesystems"][0]["paths"] == [str(tmp_path)]
    assert result.results["here-1"]["touch a file"].result["changed"] is True
    assert "touch a file" not in result.results["here-2"]  # it failed before
    assert result.results["gone"]["node facts"].status == "unreachable"
    assert (tmp_path / "touched-here-1").exists() and not (tmp_path / "touched-here-2").exists()

    kinds = [e.kind for e in events]
    assert kinds[-1] == "stats" and kinds.count("task_start") == 3
    assert {(e.kind, e.host) for e in events if e.task == "node facts" and e.host} == {
        ("host_start", "here-1"), ("host_start", "here-2"), ("host_start", "gone"),
        ("host_ok", "here-1"), ("host_ok", "here-2"), ("host_unreachable", "gone")}
    assert list(private_tmp.iterdir()) == []  # the private data dir is gone


def test_check_mode_and_limit(tmp_path: Path) -> None:
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK)
    result = run_playbook(book, inventory(tmp_path), limit="here-1", check=True,
                          extravars={"model_dir": str(tmp_path)}, capture=["touch a file"])
    assert result.ok and result.hosts == ["here-1"]
    assert result.results["here-1"]["touch a file"].result["changed"] is True
    assert not (tmp_path / "touched-here-1").exists()


def test_a_failed_loop_names_the_item_that_failed(tmp_path: Path) -> None:
    """Ansible's message for a loop is "One or more items failed": the host's error is the
    failed item's own (the preflight's refusals are a loop over shards)."""
    book = tmp_path / "loop.yml"
    book.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - name: check each\n"
                    "      ansible.builtin.assert:\n        that: item != 'b'\n"
                    "        fail_msg: item {{ item }} is bad\n"
                    "      loop: [a, b, c]\n")
    result = run_playbook(book, inventory(tmp_path), limit="here-1")
    assert result.host_errors == {"here-1": "failed: item b is bad"}


def test_a_playbook_ansible_cannot_run_is_an_error(tmp_path: Path) -> None:
    book = tmp_path / "broken.yml"
    book.write_text("- hosts: all\n  tasks:\n    - name: x\n      no.such.module_at_all: {}\n")
    with pytest.raises(RunnerError) as err:
        run_playbook(book, inventory(tmp_path))
    assert "could not run broken.yml" in err.value.message
    assert any("no.such.module_at_all" in line for line in err.value.detail)


def test_missing_inventory_or_playbook(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match="no inventory"):
        run_playbook(ansible_content.playbook("facts.yml"), tmp_path / "nope")
    with pytest.raises(RunnerError, match="no playbook"):
        run_playbook(tmp_path / "nope.yml", inventory(tmp_path))


def _adhoc(module: str, args: str = "") -> tuple[int, dict[str, object], str]:
    env = {**os.environ, **ansible_env(forks=1), "ANSIBLE_PYTHON_INTERPRETER": PY}
    cmd = [str(VENV_BIN / "ansible"), "localhost", "-m", module] + (["-a", args] if args else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=300)
    head, _, body = proc.stdout.partition(" => ")
    assert head.startswith("localhost | SUCCESS"), proc.stdout + proc.stderr
    return proc.returncode, json.loads(body), proc.stderr


def test_ansible_localhost_node_facts_reports_this_machine(tmp_path: Path) -> None:
    rc, out, _ = _adhoc("llmgw.cluster.node_facts", f"model_dirs={tmp_path},/nonexistent cache_dir={tmp_path}/c")
    assert rc == 0 and out["changed"] is False
    facts = out["ansible_facts"]
    assert isinstance(facts, dict)
    with open("/proc/meminfo") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
    assert facts["llmgw_memory"]["meminfo_total_mb"] == kb // 1024
    assert facts["llmgw_memory_total_mb"] <= kb // 1024
    (fs,) = facts["llmgw_filesystems"]
    vfs = os.statvfs(tmp_path)
    assert fs["paths"] == [str(tmp_path)] and fs["total_bytes"] == vfs.f_blocks * vfs.f_frsize
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert fs["mount"] in mounts


def test_ansible_localhost_gpu_facts_no_gpus_with_the_reason() -> None:
    rc, out, _ = _adhoc("llmgw.cluster.gpu_facts")
    assert rc == 0 and out["changed"] is False
    assert out["ansible_facts"] == {
        "llmgw_gpus": None,
        "llmgw_gpus_unknown_reason": "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) is not installed",
        "llmgw_gpu_host": {"driver_version": None, "cuda_version": None, "fabric_manager": None,
                           "kernel_log": None, "notes": []}}
