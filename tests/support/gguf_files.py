"""Real GGUF files for the tests: the project's tiny model and deliberately broken variants."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

REPO = Path(__file__).resolve().parents[2]


def tiny_model(out: Path) -> Path:
    """The real tiny llama model, written by the project's own generator."""
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_gguf.py"), str(out)],
                   check=True, capture_output=True)
    return out


def write_gguf(out: Path, *, arch: str = "llama", tensor_type_patch: int | None = None,
               version_patch: int | None = None) -> Path:
    """A small GGUF; patches set the on-disk version or the first tensor's ggml type id."""
    w = GGUFWriter(str(out), arch)
    w.add_block_count(1)
    w.add_tensor("tok_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(out.read_bytes())
    if version_patch is not None:
        data[4:8] = struct.pack("<I", version_patch)
    if tensor_type_patch is not None:
        name = b"tok_embd.weight"
        i = data.index(name) + len(name)
        n_dims = struct.unpack_from("<I", data, i)[0]
        type_at = i + 4 + 8 * n_dims
        data[type_at:type_at + 4] = struct.pack("<I", tensor_type_patch)
    out.write_bytes(bytes(data))
    return out


def engine_caps_path() -> Path:
    """The real build's capabilities, written by scripts/build-engine beside llama-server."""
    cache = Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache" / "llmgw"))
    path = cache / "engine" / "llama-server.caps.json"
    assert path.is_file(), f"{path} is missing: run scripts/setup-host (it builds the engine and its caps)"
    return path
