"""Catalog values stay data in Ansible: a Jinja expression in args, env or a source is
passed through llmgw.runner (real ansible-runner, real ansible-playbook) and reaches the
rendered unit, or the weights module, as the literal text; the lookup never runs.

Before llmgw.runner wrote the extra vars as `!unsafe` YAML, ansible-runner passed them
as JSON on the command line, which Ansible trusts as templates: `lookup('pipe', ...)`
ran as the operator on the control host.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmgw.runner import run_playbook
from llmgw.weights.names import cache_name

REPO = Path(__file__).resolve().parents[2]
RENDER = REPO / "tests" / "apply" / "render_units.yml"
APPLY = REPO / "playbooks" / "apply.yml"


def _inventory(tmp: Path) -> Path:
    inv = tmp / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return inv


def _attack(marker: Path) -> str:
    return "{{ lookup('pipe', 'touch " + str(marker) + "') }}"


def test_args_and_env_render_as_literal_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # render_units.yml uses the role's template outside the role: give it the role's filters
    monkeypatch.setenv("ANSIBLE_FILTER_PLUGINS", str(REPO / "roles" / "llmgw_engine" / "filter_plugins"))
    pwned = [tmp_path / f"PWNED-{i}" for i in range(4)]
    shard = {"unit": "llmgw-x-1-0", "replica": "x-1", "model": "x", "engine": "llamacpp",
             "model_path": "/srv/models/x.gguf", "port": 20000, "gpus": [],
             "args": ["--ctx-size", _attack(pwned[0]),
                      "{% if lookup('pipe', 'touch " + str(pwned[1]) + "') %}{% endif %}"],
             "env": {"A_1": _attack(pwned[2])}}
    vllm = {**shard, "unit": "llmgw-y-1-0", "replica": "y-1", "engine": "vllm", "gpus": [0],
            "args": [_attack(pwned[3])], "env": {}}
    out = tmp_path / "units"
    out.mkdir()
    result = run_playbook(RENDER, _inventory(tmp_path), extravars={"shards": [shard, vllm], "out_dir": str(out)})
    assert result.ok, result.output_tail
    assert not [p for p in pwned if p.exists()], "a catalog value was run as a template"
    unit = (out / "llmgw-x-1-0.service").read_text()
    assert f'"{_attack(pwned[0])}"' in unit
    assert "{%% if lookup('pipe'" in unit  # systemd's % escaped by the template
    assert f'Environment="A_1={_attack(pwned[2])}"' in unit
    assert _attack(pwned[3]) in (out / "llmgw-y-1-0.service").read_text()


def test_source_reaches_the_weights_module_as_literal_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real apply playbook's weights play on this host: a file:// source whose path
    holds a Jinja expression is fetched from exactly that path."""
    pwned = tmp_path / "PWNED-source"
    monkeypatch.setenv("LLMGW_TEST_PWNED", str(pwned))  # a file name cannot hold the marker's '/'
    models = tmp_path / "models"
    models.mkdir()
    model = models / "m-{{ lookup('pipe', 'touch $LLMGW_TEST_PWNED') }}.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    source = f"file://{model}"
    cache = tmp_path / "cache"
    weights = {"localhost": [{"source": source, "name": cache_name(source)}]}
    result = run_playbook(APPLY, _inventory(tmp_path), extravars={
        "llmgw_apply_weights": weights, "llmgw_apply_weight_targets": "localhost",
        "llmgw_apply_targets": "all:!all", "llmgw_apply_shards": {}, "llmgw_apply_artifacts": "",
        "llmgw_weights_cache_dir": str(cache), "llmgw_model_dirs": [str(models)],
        "llmgw_weights_poll": 1, "llmgw_weights_timeout": 120})
    assert not pwned.exists(), "a catalog source was run as a template"
    assert result.ok, result.host_errors or result.output_tail
    fetched = [p for p in cache.rglob("*") if p.is_file() and p.read_bytes().startswith(b"GGUF")]
    assert fetched, f"nothing fetched into {cache}: {sorted(cache.rglob('*'))}"
