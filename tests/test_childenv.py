"""llmgw.childenv: which variables a child of llmgw never inherits."""

from __future__ import annotations

import pytest

from llmgw.childenv import child_env, is_secret


@pytest.mark.parametrize("name", ["LLMGW_CONTROLLER_TOKEN", "LLMGW_ROUTER_REPORT_SECRET", "llmgw_db_password"])
def test_a_secret_variable_added_later_is_covered(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "x")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", "/etc/vault-pass")  # the operator's Ansible setting stays
    env = child_env()
    assert name not in env and env["ANSIBLE_VAULT_PASSWORD_FILE"] == "/etc/vault-pass"


@pytest.mark.parametrize("name", ["PATH", "HOME", "SSH_AUTH_SOCK", "ANSIBLE_SSH_ARGS", "LLMGW_CACHE", "LLMGW_IMAGE"])
def test_what_children_need_is_kept(name: str) -> None:
    assert not is_secret(name)
