"""`llmgw catalog validate` reads each GGUF adapter's header, as it does a model's: a file that
is not an adapter, or one for another architecture than its base's, is refused at its line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.support.cli import run_cli

MakeSite = Callable[..., Path]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gguf")
    out = {"base": d / "tiny.gguf", "lora": d / "tiny-lora.gguf", "qwen": d / "qwen-lora.gguf"}
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_gguf.py"), str(out["base"])],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_lora_gguf.py"), str(out["lora"])],
                   check=True, capture_output=True)
    w = gguf.GGUFWriter(str(out["qwen"]), "qwen2")  # an adapter for another architecture
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((4, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _catalog(base: Path, adapter: Path) -> str:
    return f"""
    models:
      - name: tiny
        source: file://{base}
        profiles: [{{name: cpu, engine: llamacpp}}]
        adapters:
          - name: tiny-lora
            source: file://{adapter}
    """


def validate(root: Path) -> tuple[int, str]:
    r = run_cli("-C", str(root), "catalog", "validate")
    return r.exit_code, r.stdout + r.stderr


def test_an_adapter_for_the_base_is_accepted(site: MakeSite, files: dict[str, Path]) -> None:
    code, out = validate(site({"catalog/a.yaml": _catalog(files["base"], files["lora"])}))
    assert code == 0, out


def test_a_model_named_as_an_adapter_is_refused_at_its_line(site: MakeSite, files: dict[str, Path]) -> None:
    code, out = validate(site({"catalog/a.yaml": _catalog(files["base"], files["base"])}))
    assert code == 1
    assert "catalog/a.yaml:7: models[0].adapters[0].source" in out
    assert "is a GGUF of type 'unknown', not an adapter (general.type=adapter)" in out


def test_an_adapter_for_another_architecture_is_refused(site: MakeSite, files: dict[str, Path]) -> None:
    code, out = validate(site({"catalog/a.yaml": _catalog(files["base"], files["qwen"])}))
    assert code == 1
    assert "catalog/a.yaml:7" in out and "is an adapter for qwen2, but tiny is llama" in out


def _peft(folder: Path, base: str, r: int) -> Path:
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "r": r,
                                                            "peft_type": "LORA"}))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 16)
    return folder


def _hf_catalog(base: Path, adapter: Path) -> str:
    return f"""
    models:
      - name: tiny
        source: file://{base}
        profiles: [{{name: gpu, engine: vllm, gpus: 1}}]
        adapters:
          - name: tiny-lora
            source: file://{adapter}
    """


def test_a_peft_adapter_for_the_base_is_accepted(site: MakeSite, tmp_path: Path) -> None:
    base = tmp_path / "tiny-llama"
    base.mkdir()
    adapter = _peft(tmp_path / "tiny-lora", "llmgw/tiny-llama", 8)
    code, out = validate(site({"catalog/a.yaml": _hf_catalog(base, adapter)}))
    assert code == 0, out


def test_a_peft_adapter_for_another_base_or_too_large_a_rank_is_refused(site: MakeSite, tmp_path: Path) -> None:
    base = tmp_path / "tiny-llama"
    base.mkdir()
    adapter = _peft(tmp_path / "qwen-lora", "Qwen/Qwen2.5-7B", 1024)
    code, out = validate(site({"catalog/a.yaml": _hf_catalog(base, adapter)}))
    assert code == 1
    assert "catalog/a.yaml:7" in out
    assert "its adapter_config.json says it was trained on 'Qwen/Qwen2.5-7B', but tiny's source is" in out
    assert "rank 1024 (adapter_config.json `r`) is larger than vLLM serves (512)" in out


def test_whole_repository_adapters_are_pinned_like_models(site: MakeSite) -> None:
    """A whole Hugging Face repository adapter is fetched at the commit `catalog validate`
    resolved (the weights module fetches nothing unpinned); until then its model is not placed."""
    from datetime import UTC, datetime

    from llmgw.catalog import load_catalog
    from llmgw.site import Site
    from llmgw.weights.check import pin_catalog
    from llmgw.weights.names import cache_name
    from llmgw.weights.sources import SourceInfo, write_source

    text = """
    models:
      - name: tiny
        source: hf://llmgw/tiny-llama/tiny.gguf
        profiles: [{name: gpu, engine: vllm, gpus: 1}]
        adapters:
          - {name: tiny-lora, source: "hf://llmgw/tiny-lora"}
    """
    root = site({"catalog/a.yaml": text})
    s = Site.load(root)
    cat = load_catalog(s.catalog_dir, root=root)
    _, unpinned = pin_catalog(cat, s)
    assert unpinned == {"hf://llmgw/tiny-llama/tiny.gguf": [
        "adapter tiny-lora: hf://llmgw/tiny-lora is not pinned to a commit (not resolved yet); run `llmgw catalog "
        "validate` where the site's Hugging Face endpoint is reachable"]}
    spec = "hf://llmgw/tiny-lora@main"
    pinned = f"hf://llmgw/tiny-lora@{'a' * 40}"
    write_source(s.facts_dir, SourceInfo(source=spec, cache_name=cache_name(spec), pinned=pinned,
                                         inspected_at=datetime.now(UTC)))
    out, unpinned = pin_catalog(cat, s)
    assert unpinned == {} and [a.source for a in out.models["tiny"].adapters] == [pinned]


def test_validate_reads_each_rank_and_a_vllm_replica_sizes_its_slots_by_the_largest(
        site: MakeSite, tmp_path: Path) -> None:
    """`r` from each PEFT adapter's adapter_config.json, as `catalog validate` recorded it, reaches
    the plan; vLLM's --max-lora-rank is the largest, rounded up to a rank vLLM serves (12, 40 -> 64).
    tests/engines/test_parsers.py puts such lines through vLLM's own parser."""
    import dataclasses

    from llmgw.catalog import load_catalog
    from llmgw.engines import ShardAdapter, command
    from llmgw.planner import make_plan
    from llmgw.planner.load import adapter_ranks
    from llmgw.site import Site
    from tests.engines.shapes import LAYOUT, shards
    from tests.support.plan_inputs import facts, host, inputs

    base = tmp_path / "tiny-llama"
    base.mkdir()
    small, large = _peft(tmp_path / "small", "llmgw/tiny-llama", 12), _peft(tmp_path / "large", "llmgw/tiny-llama", 40)
    text = _hf_catalog(base, small).rstrip(" ") + f"""\
          - name: tiny-large
            source: file://{large}
    """
    root = site({"catalog/a.yaml": text})
    code, out = validate(root)
    assert code == 0, out
    s = Site.load(root)
    assert adapter_ranks(s.facts_dir) == {f"file://{small}": 12, f"file://{large}": 40}
    node = host("g", model_dirs=[str(tmp_path)])  # the file:// sources are under the node's model dirs
    plan_in = dataclasses.replace(inputs(load_catalog(s.catalog_dir, root=root), [node], [facts("g", 1)]),
                                  adapter_ranks=adapter_ranks(s.facts_dir))
    r = make_plan(plan_in).desired.replicas[0]
    assert [(a.name, a.rank) for a in r.adapters or []] == [("tiny-lora", 12), ("tiny-large", 40)]
    shard = dataclasses.replace(shards("vllm")["one-gpu"], adapters=tuple(
        ShardAdapter(a.name, f"/var/cache/llmgw/{a.cache_name}", a.rank) for a in r.adapters or []))
    words = command(shard, LAYOUT)
    assert words[words.index("--max-lora-rank") + 1] == "64"
    # Not known (not validated yet): no --max-lora-rank, vLLM's default applies.
    unknown = make_plan(dataclasses.replace(plan_in, adapter_ranks={})).desired.replicas[0]
    assert [a.rank for a in unknown.adapters or []] == [None, None]
