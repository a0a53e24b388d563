"""Every catalog rule, through `llmgw catalog validate`: exit codes, file:line, what to change."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.catalog import load_catalog, parse_duration
from tests.support.cli import run_cli

GOOD = """
models:
  - name: coder
    aliases: [code]
    source: hf://org/repo/coder.gguf
    fallbacks: [small]
    scaling: {min: 1, max: 2, idle_timeout: 30m}
    profiles:
      - name: gpu
        engine: vllm
        gpus: 2
        gpu_class: H100-80GB
        min_memory_gb: 24
        node_selector: {role: coding}
        args: ["--max-model-len", "32768"]
        env: {VLLM_LOGGING_LEVEL: INFO}
      - name: cpu
        engine: llamacpp
  - name: small
    source: https://huggingface.co/org/repo/resolve/main/small.gguf  # a URL on the endpoint
    scaling: {min: 0}
    profiles:
      - {name: cpu, engine: llamacpp}
"""

MakeSite = Callable[..., Path]


def validate(root: Path) -> tuple[int, str]:
    r = run_cli("-C", str(root), "catalog", "validate")
    return r.exit_code, r.stdout + r.stderr


def test_valid_catalog_is_accepted(site: MakeSite) -> None:
    code, out = validate(site({"catalog/a.yaml": GOOD}))
    assert code == 0, out
    assert "The catalog is valid: 2 models." in out


def test_omitted_max_follows_min(site: MakeSite) -> None:
    cat = load_catalog(site({"catalog/a.yaml": GOOD}) / "catalog")
    assert cat.models["small"].scaling.max == 0
    assert cat.models["coder"].scaling.max == 2
    assert cat.models["coder"].scaling.idle_timeout == 1800


def test_aliases_resolve(site: MakeSite) -> None:
    cat = load_catalog(site({"catalog/a.yaml": GOOD}) / "catalog")
    resolved = cat.resolve("code")
    assert resolved is not None and resolved.name == "coder"
    assert cat.resolve("nothing") is None


@pytest.mark.parametrize(("text", "expected"), [
    # max below min names the max line
    ("""
     models:
       - name: m
         source: hf://a/b/c
         scaling:
           min: 2
           max: 1
         profiles: [{name: p, engine: vllm}]
     """, "catalog/bad.yaml:6: models[0].scaling.max: 1 is below min 2"),
    # unknown key in a profile: a typo must not silently mean nothing
    ("""
     models:
       - name: m
         source: hf://a/b/c
         profiles:
           - name: p
             engine: vllm
             min_memroy_gb: 3
     """, "catalog/bad.yaml:7: models[0].profiles[0].min_memroy_gb: unknown key 'min_memroy_gb'"),
    # unknown key at the top of a file
    ("""
     model:
       - name: m
     """, "catalog/bad.yaml:1: model: unknown key; a catalog file holds only `models:`"),
    # unknown key in scaling
    ("""
     models:
       - name: m
         source: hf://a/b/c
         scaling: {min: 1, maximum: 3}
         profiles: [{name: p, engine: vllm}]
     """, "models[0].scaling.maximum: unknown key"),
    # unknown engine
    ("""
     models:
       - name: m
         source: hf://a/b/c
         profiles: [{name: p, engine: tgi}]
     """, "catalog/bad.yaml:4: models[0].profiles[0].engine: 'tgi' is not allowed"),
    # multi-node without GPUs
    ("""
     models:
       - name: m
         source: hf://a/b/c
         profiles:
           - name: p
             engine: vllm
             nodes: 2
     """, "models[0].profiles[0].nodes: 2 spans nodes but gpus is 0"),
    # a duration that is not one
    ("""
     models:
       - name: m
         source: hf://a/b/c
         scaling: {min: 0, idle_timeout: soon}
         profiles: [{name: p, engine: llamacpp}]
     """, "models[0].scaling.idle_timeout: 'soon' is not a duration"),
    # a source llmgw cannot fetch
    ("""
     models:
       - name: m
         source: s3://bucket/key
         profiles: [{name: p, engine: llamacpp}]
     """, "models[0].source: 's3://bucket/key' is not a source llmgw can fetch"),
    # no profiles at all
    ("""
     models:
       - name: m
         source: hf://a/b/c
         profiles: []
     """, "models[0].profiles:"),
    # a missing required key
    ("""
     models:
       - name: m
         profiles: [{name: p, engine: llamacpp}]
     """, "models[0].source: 'source' is required"),
    # broken YAML names its line
    ("""
     models:
       - name: m
         source: [unclosed
     """, "catalog/bad.yaml:4: not valid YAML"),
    # a profile listed twice
    ("""
     models:
       - name: m
         source: hf://a/b/c
         profiles: [{name: p, engine: llamacpp}, {name: p, engine: vllm}]
     """, "profile 'p' is listed twice"),
])
def test_invalid_catalog_names_file_and_line(site: MakeSite, text: str, expected: str) -> None:
    code, out = validate(site({"catalog/bad.yaml": text}))
    assert code == 1
    assert "Error: the catalog has" in out
    assert expected in out
    assert "Traceback" not in out


def test_names_and_aliases_unique_across_files(site: MakeSite) -> None:
    other = """
    models:
      - name: coder
        source: hf://x/y/z
        profiles: [{name: p, engine: llamacpp}]
      - name: other
        aliases: [code, small]
        source: hf://x/y/w
        profiles: [{name: p, engine: llamacpp}]
    """
    code, out = validate(site({"catalog/a.yaml": GOOD, "catalog/b.yaml": other}))
    assert code == 1
    assert "catalog/b.yaml:2: models[0].name: 'coder' is already used by model 'coder' at catalog/a.yaml:2" in out
    assert "'code' is already used by model 'coder'" in out
    assert "catalog/b.yaml:6: models[1].aliases[0]: 'code'" in out  # the alias's own line
    assert "'small' is already used by model 'small'" in out
    assert "3 problems" in out


def test_fallbacks_must_exist_and_not_be_self(site: MakeSite) -> None:
    text = """
    models:
      - name: a
        source: hf://x/y/a
        fallbacks: [ghost, a]
        profiles: [{name: p, engine: llamacpp}]
    """
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1
    assert "models[0].fallbacks[0]: 'ghost' is not a model in the catalog" in out
    assert "models[0].fallbacks[1]: 'a' is this model itself" in out


def test_fallback_cycle_is_reported_once(site: MakeSite) -> None:
    text = """
    models:
      - {name: a, source: hf://x/y/a, fallbacks: [b], profiles: [{name: p, engine: llamacpp}]}
      - {name: b, source: hf://x/y/b, fallbacks: [c], profiles: [{name: p, engine: llamacpp}]}
      - {name: c, source: hf://x/y/c, fallbacks: [a], profiles: [{name: p, engine: llamacpp}]}
      - {name: d, source: hf://x/y/d, fallbacks: [a], profiles: [{name: p, engine: llamacpp}]}
    """
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1
    assert out.count("fallbacks form a loop") == 1
    assert "a -> b -> c -> a" in out


def test_fallback_through_alias_counts(site: MakeSite) -> None:
    text = """
    models:
      - {name: a, aliases: [alpha], source: hf://x/y/a, fallbacks: [beta], profiles: [{name: p, engine: llamacpp}]}
      - {name: b, aliases: [beta], source: hf://x/y/b, fallbacks: [alpha], profiles: [{name: p, engine: llamacpp}]}
    """
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1
    assert "a -> b -> a" in out


def test_every_problem_reported_at_once_across_files(site: MakeSite) -> None:
    one = """
    models:
      - name: a
        source: hf://x/y/a
        scaling: {min: 3, max: 1}
        profiles: [{name: p, engine: llamacpp}]
      - name: b
        source: hf://x/y/b
        fallbacks: [nowhere]
        profiles: [{name: p, engine: llamacpp}]
    """
    two = """
    models:
      - name: c
        source: hf://x/y/c
        profiles: [{name: p, engine: llamacpp, gpuz: 1}]
    """
    code, out = validate(site({"catalog/one.yaml": one, "catalog/sub/two.yml": two}))
    assert code == 1
    assert "3 problems" in out
    assert "catalog/one.yaml:4: models[0].scaling.max" in out
    assert "catalog/one.yaml:8: models[1].fallbacks[0]" in out  # the line of the fallback, not of the model
    assert "catalog/sub/two.yml:4: models[0].profiles[0].gpuz" in out


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("1h30m", 5400), ("90s", 90), (45, 45), ("2h", 7200)])
def test_durations(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_models_json_and_table(site: MakeSite) -> None:
    root = site({"catalog/a.yaml": GOOD})
    r = run_cli("-C", str(root), "models", "--json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert [m["name"] for m in data["models"]] == ["coder", "small"]
    assert data["models"][0]["scaling"] == {"min": 1, "max": 2, "idle_timeout": 1800, "target_in_flight": None,
                                            "up_cooldown": 30, "down_cooldown": 300, "activation_timeout": 300}
    r = run_cli("-C", str(root), "models")
    assert r.exit_code == 0
    assert "coder" in r.stdout and "on demand" in r.stdout


def test_missing_catalog_folder(tmp_path: Path) -> None:
    (tmp_path / "llmgw.yaml").write_text("catalog: nowhere\n")
    code, out = validate(tmp_path)
    assert code == 1
    assert "catalog folder does not exist" in out


TRUST = """
models:
  - name: m
    source: hf://org/repo
    profiles:
      - name: p
        engine: {engine}
        trust_remote_code: {value}
        args: ["--max-model-len", "4096", "--enforce-eager", "--kv-cache-dtype=fp8", "--temperature", "-1"]
        env: {{VLLM_ATTENTION_BACKEND: FLASHINFER, NCCL_DEBUG: INFO, OMP_NUM_THREADS: "8",
               PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True", TOKENIZERS_PARALLELISM: "false"}}
"""


def test_trust_remote_code_is_a_key_and_tuning_args_and_env_pass(site: MakeSite) -> None:
    root = site({"catalog/a.yaml": TRUST.format(engine="vllm", value="true")})
    code, out = validate(root)
    assert code == 0, out
    profile = load_catalog(root / "catalog").models["m"].profiles[0]
    assert profile.trust_remote_code is True and profile.args[-1] == "-1"


@pytest.mark.parametrize(("engine", "value", "expected"), [
    ("llamacpp", "true", "catalog/a.yaml:7: models[0].profiles[0].trust_remote_code: llama.cpp runs no code"),
    ("vllm", "yes", "catalog/a.yaml:7: models[0].profiles[0].trust_remote_code: Input should be a valid boolean"),
    ("sglang", '"true"', "catalog/a.yaml:7: models[0].profiles[0].trust_remote_code: Input should be a valid boolean"),
])
def test_trust_remote_code_is_a_real_yes_and_not_for_llamacpp(site: MakeSite, engine: str, value: str,
                                                              expected: str) -> None:
    text = TRUST.format(engine=engine, value=value)
    if engine == "llamacpp":  # its own tuning words
        text = text.replace('"--enforce-eager", "--kv-cache-dtype=fp8", ', "")
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1, out
    assert expected in out, out


def test_every_refused_arg_and_env_name_is_reported_at_its_own_line(site: MakeSite) -> None:
    text = """
models:
  - name: m
    source: hf://org/repo
    profiles:
      - name: p
        engine: vllm
        args:
          - --max-model-len
          - "4096"
          - --served-model-name
          - other
          - --trust_remote_code
        env:
          VLLM_LOGGING_LEVEL: INFO
          LD_PRELOAD: /tmp/x.so
"""
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1, out
    assert ("catalog/a.yaml:10: models[0].profiles[0].args[2]: '--served-model-name' is refused in args: "
            "llmgw sets the engine's served name itself (the model's name): remove it") in out
    assert ("catalog/a.yaml:12: models[0].profiles[0].args[4]: '--trust_remote_code' (read by vllm as "
            "--trust-remote-code) is refused in args: set `trust_remote_code: true` in the profile") in out
    assert ("catalog/a.yaml:15: models[0].profiles[0].env.LD_PRELOAD: the key 'LD_PRELOAD' is not allowed here: "
            "LD_PRELOAD is not an engine tuning variable") in out
    assert "VLLM_LOGGING_LEVEL" not in out
