"""The engine descriptors are the one source: what cannot import llmgw (the engine role's
variables, the collection's fact module on the hosts) says what they say, and the
descriptor module itself stays light enough for the router to import.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmgw.engines import Layout, Shard, command, descriptor, get, names, python_engines, register, unregister
from llmgw.engines.descriptor import WEIGHT_FORMATS
from llmgw.router.endpoints import ENDPOINTS
from llmgw.weights.browse import WEIGHT_SUFFIXES
from tests.engines.fourth_engine import ENGINE as FOURTH
from tests.support.facts import util

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llmgw_engine"


def role_yaml(part: str) -> dict[str, object]:
    loaded = yaml.safe_load((ROLE / part / "main.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_role_knows_the_engines_as_their_descriptors_say() -> None:
    roles_vars = role_yaml("vars")
    assert sorted(roles_vars["_llmgw_engine_installable"]) == sorted(names())  # type: ignore[arg-type]
    assert roles_vars["_llmgw_engine_python"] == list(python_engines())
    assert roles_vars["_llmgw_engine_key_env"] == {e.name: e.key_env for e in descriptor.engines() if e.key == "env"}
    assert roles_vars["_llmgw_engine_key_config"] == [e.name for e in descriptor.engines() if e.key == "config"]


def test_the_role_pins_each_python_engine_at_its_descriptors_version() -> None:
    defaults = role_yaml("defaults")
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for name in python_engines():
        key = f"llmgw_engine_{name}_version"
        assert defaults[key] == get(name).version and specs[key]["default"] == get(name).version, key


def test_the_role_waits_for_the_health_path_each_descriptor_names() -> None:
    # The role and the router (llmgw/router/health.py) ask one path of every engine: an
    # engine with another one needs both to read it from here first.
    assert {e.health for e in descriptor.engines()} == {"/health"}
    assert "{{ item.port }}/health" in (ROLE / "tasks" / "service.yml").read_text()
    assert 'endpoint + "/health"' in (REPO / "llmgw" / "router" / "health.py").read_text()


def test_the_hosts_fact_module_looks_for_the_engines_the_descriptors_install() -> None:
    versions = util("engine_versions")
    binaries = {e.name: e.programs[0] for e in descriptor.engines() if e.install == "binary"}
    assert binaries == versions.BINARY_ENGINES
    assert python_engines() == versions.PYTHON_ENGINES


def test_every_endpoint_and_weight_format_a_descriptor_names_is_one_llmgw_knows() -> None:
    for e in descriptor.engines():
        assert set(e.endpoints) <= set(ENDPOINTS), e.name
        assert all(path.startswith("/") for path in e.endpoints.values()), e.name
        assert set(e.weight_formats) <= set(WEIGHT_FORMATS) and e.weight_formats, e.name
        assert e.adapters in ("none", "static", "runtime")
    assert set(WEIGHT_SUFFIXES.values()) == set(WEIGHT_FORMATS)
    assert {f: descriptor.for_format(f) for f in WEIGHT_FORMATS} == {
        "gguf": ("llamacpp",), "safetensors": ("vllm", "sglang"), "pytorch": ("vllm", "sglang")}


def test_the_descriptor_module_imports_nothing_outside_llmgw_engines_and_the_standard_library() -> None:
    code = ("import json, sys; before = set(sys.modules); import llmgw.engines.descriptor; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       cwd=REPO).stdout)
    assert "llmgw.engines.vllm" in loaded  # the package registers its engines on the way
    ours = sorted(m for m in loaded if m.startswith("llmgw") and not m.startswith("llmgw.engines"))
    assert ours == ["llmgw"], ours
    third_party = {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"llmgw"}
    assert third_party == set(), third_party


def test_a_name_is_registered_once_and_an_unknown_one_names_the_known() -> None:
    with pytest.raises(ValueError, match="'vllm' is registered already"):
        register(dataclasses.replace(FOURTH, name="vllm"))
    register(FOURTH)
    try:
        register(FOURTH)  # the same descriptor again: a no-op (a module imported twice)
        assert names()[-1] == FOURTH.name
        assert command(Shard(engine=FOURTH.name, model="m", model_path="/m", port=1), Layout())[1] == "serve"
    finally:
        unregister(FOURTH.name)
    with pytest.raises(ValueError, match=r"unknown engine 'tgi' \(known: llamacpp, sglang, vllm\)"):
        get("tgi")


@pytest.mark.parametrize(("change", "said"), [
    ({"install": "venv"}, "a venv engine has a distribution and a version"),
    ({"programs": ()}, "a binary one programs instead"),
    ({"key_env": ""}, "key 'env' needs key_env"),
    ({"weight_formats": ("onnx",)}, "unknown weight formats ['onnx']"),
])
def test_a_descriptor_that_contradicts_itself_is_refused(change: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match=rf"engine tinyserve: .*{re.escape(said)}"):
        dataclasses.replace(FOURTH, **change)  # type: ignore[arg-type]
