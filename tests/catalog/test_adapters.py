"""LoRA adapters in the catalog (docs/adapters.md): through `llmgw catalog validate`, with file:line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.catalog import load_catalog
from llmgw.catalog.schema import profile_adapters
from tests.support.cli import run_cli

MakeSite = Callable[..., Path]

GOOD = """
models:
  - name: tiny
    source: file:///srv/models/tiny.gguf
    profiles:
      - {name: cpu, engine: llamacpp}
      - {name: gpu, engine: vllm, gpus: 1}
    adapters:
      - name: tiny-sql
        aliases: [sql]
        source: file:///srv/models/tiny-sql.gguf
        profiles: [cpu]
      - name: tiny-poet
        source: file:///srv/models/tiny-poet.gguf
        scale: 0.5
"""


def validate(root: Path) -> tuple[int, str]:
    r = run_cli("-C", str(root), "catalog", "validate", "--offline")
    return r.exit_code, r.stdout + r.stderr


def test_adapters_load_with_their_profiles(site: MakeSite) -> None:
    root = site({"catalog/a.yaml": GOOD})
    code, out = validate(root)
    assert code == 0, out
    cat = load_catalog(root / "catalog")
    model = cat.models["tiny"]
    assert [a.name for a in profile_adapters(model, "cpu")] == ["tiny-sql", "tiny-poet"]
    assert [a.name for a in profile_adapters(model, "gpu")] == ["tiny-poet"]
    found = cat.resolve_adapter("sql")
    assert found is not None and found[0].name == "tiny" and found[1].name == "tiny-sql"
    assert cat.resolve("tiny-sql") is None  # an adapter is not a model: scale, placement never see it


def test_adapter_name_clashing_with_a_model_is_refused_at_its_line(site: MakeSite) -> None:
    other = """
    models:
      - name: tiny-poet
        source: file:///srv/models/x.gguf
        profiles: [{name: cpu, engine: llamacpp}]
    """
    code, out = validate(site({"catalog/a.yaml": GOOD, "catalog/b.yaml": other}))
    assert code == 1
    assert "catalog/b.yaml:2" in out
    assert "'tiny-poet' is already used by adapter 'tiny-poet' of model 'tiny' at catalog/a.yaml:12" in out


def test_adapter_alias_clashing_with_a_model_alias_is_refused(site: MakeSite) -> None:
    other = """
    models:
      - name: other
        aliases: [sql]
        source: file:///srv/models/x.gguf
        profiles: [{name: cpu, engine: llamacpp}]
    """
    code, out = validate(site({"catalog/a.yaml": GOOD, "catalog/z.yaml": other}))
    assert code == 1
    assert "catalog/z.yaml:3" in out and "'sql' is already used by adapter 'sql' of model 'tiny'" in out


def test_adapter_twice_in_one_model_is_refused(site: MakeSite) -> None:
    text = GOOD.replace("name: tiny-poet", "name: tiny-sql")
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1
    assert "'tiny-sql' is listed twice; each adapter once" in out


def test_adapter_on_an_engine_without_adapters_is_refused(site: MakeSite) -> None:
    from llmgw.engines import descriptor

    # Every registered engine takes adapters; a fourth one (as tests/engines/fourth_engine.py) may not.
    from tests.engines.fourth_engine import ENGINE as fourth

    descriptor.register(fourth)
    try:
        assert fourth.adapters == "none"
        text = f"""
        models:
          - name: m
            source: file:///srv/models/m
            profiles: [{{name: p, engine: {fourth.name}}}]
            adapters:
              - {{name: m-lora, source: file:///srv/models/m-lora}}
        """
        code, out = validate(site({"catalog/a.yaml": text}))
    finally:
        descriptor.unregister(fourth.name)
    assert code == 1
    assert f"but {fourth.title} serves no LoRA adapters" in out and "catalog/a.yaml:" in out


def test_adapter_naming_an_unknown_profile_is_refused(site: MakeSite) -> None:
    code, out = validate(site({"catalog/a.yaml": GOOD.replace("profiles: [cpu]", "profiles: [cpux]")}))
    assert code == 1
    assert "names the profile 'cpux', which this model does not have; name one of cpu, gpu" in out


def test_adapter_source_is_checked_like_a_model_source(site: MakeSite) -> None:
    code, out = validate(site({"catalog/a.yaml": GOOD.replace("file:///srv/models/tiny-sql.gguf",
                                                                "file://../tiny-sql.gguf")}))
    assert code == 1
    assert "catalog/a.yaml:10" in out and "file:///absolute/path" in out


def test_fallback_to_an_adapter_is_refused(site: MakeSite) -> None:
    other = """
    models:
      - name: other
        source: file:///srv/models/x.gguf
        fallbacks: [tiny-sql]
        profiles: [{name: cpu, engine: llamacpp}]
    """
    code, out = validate(site({"catalog/a.yaml": GOOD, "catalog/b.yaml": other}))
    assert code == 1
    assert "catalog/b.yaml:4" in out and "'tiny-sql' is a LoRA adapter, not a model" in out


RUNTIME = """
models:
  - name: tiny-hf
    source: hf://llmgw/tiny-llama@main
    profiles:
      - {name: gpu, engine: vllm, gpus: 1}
    adapter_loading: runtime
    max_loras: 2
    adapters:
      - {name: hf-sql, source: hf://llmgw/tiny-sql@main}
      - {name: hf-poet, source: hf://llmgw/tiny-poet@main}
"""


def test_adapters_loaded_at_run_time_validate_with_max_loras(site: MakeSite) -> None:
    root = site({"catalog/a.yaml": RUNTIME})
    code, out = validate(root)
    assert code == 0, out
    m = load_catalog(root / "catalog").models["tiny-hf"]
    assert (m.adapter_loading, m.max_loras) == ("runtime", 2)


@pytest.mark.parametrize(("edit", "why"), [
    (("    max_loras: 2\n", ""), "adapter_loading: runtime needs max_loras: N, how many adapters one replica holds"),
    (("    adapter_loading: runtime\n", ""), "max_loras is how many adapters the router keeps loaded on a replica "
                                             "with adapter_loading: runtime; add `adapter_loading: runtime`"),
    (("{name: gpu, engine: vllm, gpus: 1}", "{name: cpu, engine: llamacpp}"),
     "adapter_loading: runtime, but profile 'cpu' runs llama.cpp, which llmgw loads adapters into only at start"),
    (("adapter_loading: runtime", "adapter_loading: lazy"), "adapter_loading"),
])
def test_run_time_loading_mistakes_are_refused_at_the_models_line(site: MakeSite, edit: tuple[str, str],
                                                                   why: str) -> None:
    code, out = validate(site({"catalog/a.yaml": RUNTIME.replace(*edit)}))
    assert code == 1
    assert why in " ".join(out.split()) and "catalog/a.yaml:" in out, out


def test_run_time_loading_without_adapters_is_refused(site: MakeSite) -> None:
    text = RUNTIME.split("    adapters:")[0]
    code, out = validate(site({"catalog/a.yaml": text}))
    assert code == 1
    assert "adapter_loading: runtime loads this model's adapters while it serves, but it lists none" in out
