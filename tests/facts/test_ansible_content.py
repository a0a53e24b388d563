"""llmgw.ansible_content: the playbooks, roles and collection, found from this checkout or an override."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmgw import ansible_content
from llmgw.errors import RunnerError
from llmgw.weights.names import cache_name

REPO = Path(__file__).resolve().parents[2]


def test_from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ansible_content.ENV_VAR, raising=False)
    assert ansible_content.ansible_root() == REPO
    assert ansible_content.playbook("facts.yml") == REPO / "playbooks" / "facts.yml"
    assert ansible_content.roles_path() == REPO / "roles"
    assert (ansible_content.collections_path() / "ansible_collections" / "llmgw" / "cluster" / "galaxy.yml").is_file()
    assert ansible_content.collection_path() == REPO / "collections/ansible_collections/llmgw/cluster"


def test_an_override_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "ansible"
    shutil.copytree(REPO / "playbooks", copy / "playbooks")
    shutil.copytree(REPO / "collections", copy / "collections", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv(ansible_content.ENV_VAR, str(copy))
    assert ansible_content.ansible_root() == copy
    assert ansible_content.playbook("facts.yml") == copy / "playbooks" / "facts.yml"
    monkeypatch.setenv(ansible_content.ENV_VAR, str(tmp_path / "nothing"))
    with pytest.raises(RunnerError, match="LLMGW_ANSIBLE_DIR"):
        ansible_content.ansible_root()


def test_unknown_playbook() -> None:
    with pytest.raises(RunnerError, match=r"no playbook nope\.yml"):
        ansible_content.playbook("nope.yml")


def test_module_utils_are_the_files_the_hosts_get() -> None:
    names = ansible_content.module_util("cache_names")
    source = "hf://Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf"
    assert names.cache_name(source) == cache_name(source) == "5335b8e6e173fa17-qwen2.5-7b-instruct-q4_k_m.gguf"
    assert ansible_content.module_util("gpu").gpu_class("NVIDIA H100 80GB HBM3", 81559) == "H100-80GB"
    with pytest.raises(RunnerError, match="no module_util nope"):
        ansible_content.module_util("nope")
