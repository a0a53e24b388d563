"""Every module of the llmgw.cluster collection documents exactly the arguments it takes.

What ansible-test's validate-modules checks, for our modules without a collection tree
in ansible_collections/ layout on a Galaxy server: each module's `argument_spec` (taken
the way validate-modules does, by stopping AnsibleModule as the module builds it) against
the options `ansible-doc` reads from its DOCUMENTATION and doc fragments: the same names,
types, defaults, required flags, choices, element types and no_log secrets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmgw import ansible_content
from llmgw.planner.spec import parse_unit
from llmgw.runner import ansible_env
from tests.support.facts import module

VENV_BIN = Path(sys.executable).parent
PLUGINS = ansible_content.collections_path() / "ansible_collections/llmgw/cluster/plugins"
MODULES = sorted(p.stem for p in (PLUGINS / "modules").glob("*.py") if not p.name.startswith("_"))
# Defaults ansible-doc shows but an argument_spec leaves implicit.
IMPLICIT = {"required": False, "default": None, "choices": None, "elements": None, "no_log": False}


class _Built(Exception):
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec


def argument_spec(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The argument_spec the module hands AnsibleModule, caught before anything runs."""
    mod = module(name)

    def capture(*_args: Any, argument_spec: dict[str, Any], **_kwargs: Any) -> None:
        raise _Built(argument_spec)

    monkeypatch.setattr(mod, "AnsibleModule", capture)
    with pytest.raises(_Built) as built:
        mod.main()
    return built.value.spec


@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    """All modules' documentation in one ansible-doc run (which also proves every one loads)."""
    env = {**os.environ, **ansible_env(forks=1)}
    proc = subprocess.run([str(VENV_BIN / "ansible-doc"), "--json", *(f"llmgw.cluster.{m}" for m in MODULES)],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {k.rsplit(".", 1)[1]: v for k, v in json.loads(proc.stdout).items()}


def test_every_module_is_read_by_ansible_doc(docs: dict[str, Any]) -> None:
    assert sorted(docs) == MODULES and len(MODULES) >= 5
    for name, doc in docs.items():
        assert doc["doc"]["short_description"], name
        assert doc["examples"] and doc["return"] is not None, f"{name}: EXAMPLES and RETURN"
        assert doc["doc"].get("attributes", {}).get("check_mode"), f"{name}: says whether check mode works"


def _documented(option: dict[str, Any]) -> dict[str, Any]:
    return {"type": option.get("type", "str"), "required": option.get("required", False),
            "default": option.get("default"), "choices": option.get("choices"),
            "elements": option.get("elements"), "no_log": False}


def _specified(arg: dict[str, Any]) -> dict[str, Any]:
    got = {**IMPLICIT, "type": arg.get("type", "str"), **{k: arg[k] for k in IMPLICIT if k in arg}}
    got["no_log"] = False  # documentation has no no_log; checked apart below
    return got


@pytest.mark.parametrize("name", MODULES)
def test_argument_spec_matches_documentation(name: str, docs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = argument_spec(name, monkeypatch)
    options = docs[name]["doc"].get("options") or {}
    assert sorted(spec) == sorted(options), f"{name}: arguments {sorted(spec)} but documented {sorted(options)}"
    for arg, rules in spec.items():
        assert _specified(rules) == _documented(options[arg]), f"{name}: option {arg} differs from its documentation"
        if rules.get("no_log"):
            assert "secret" in options[arg]["description"][0].lower() or "token" in arg, \
                f"{name}: {arg} is no_log; its documentation should say it is a secret"


def test_the_spec_catcher_sees_a_real_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    assert argument_spec("node_facts", monkeypatch)["cache_dir"]["type"] == "path"


def test_node_facts_sample_unit_is_a_shard_unit(docs: dict[str, Any]) -> None:
    """The documented unit is named the way the planner names shard units (llmgw.planner.spec)."""
    sample = docs["node_facts"]["return"]["ansible_facts"]["contains"]["llmgw_units"]["sample"]
    assert all(parse_unit(u["name"]) is not None for u in sample), sample
