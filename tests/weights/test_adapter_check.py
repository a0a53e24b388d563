"""`llmgw catalog validate` reads each GGUF adapter's header, as it does a model's: a file that
is not an adapter, or one for another architecture than its base's, is refused at its line."""

from __future__ import annotations

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
