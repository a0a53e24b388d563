"""Can the fleet's llama-server build load this GGUF? Decided from the header alone.

The build's capabilities (`llama-server.caps.json`, written beside the binary by
scripts/build-engine from the llama.cpp sources it was built from) list the GGUF
versions, architectures and tensor types it understands.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmgw.errors import WeightsError
from llmgw.weights.gguf import GgufHeader

CAPS_FILE = "llama-server.caps.json"


@dataclass(frozen=True)
class EngineCaps:
    gguf_versions: tuple[int, ...]
    architectures: frozenset[str]
    tensor_types: dict[int, str]

    @classmethod
    def load(cls, path: Path) -> EngineCaps:
        try:
            data = json.loads(path.read_text())
            return cls(tuple(int(v) for v in data["gguf_versions"]), frozenset(data["architectures"]),
                       {int(k): str(v) for k, v in data["tensor_types"].items()})
        except FileNotFoundError:
            raise WeightsError(f"no llama-server capabilities at {path}",
                               hint="run scripts/build-engine, which writes them beside the binary") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise WeightsError(f"{path} is not a llama-server capabilities file: {exc}",
                               hint="rebuild it with scripts/build-engine") from None


def tensor_types(header: GgufHeader, examples: int = 3) -> dict[int, list[str]]:
    """ggml type id -> the first few tensor names of that type (enough to name in a message)."""
    out: dict[int, list[str]] = {}
    for t in header.tensors:
        names = out.setdefault(t.ggml_type, [])
        if len(names) < examples:
            names.append(t.name)
    return out


def servable_problems(version: int, architecture: str | None, types: Mapping[int, Sequence[str]],
                      caps: EngineCaps) -> list[str]:
    """Every reason this llama-server build would refuse the model; empty when it loads."""
    problems = []
    if version not in caps.gguf_versions:
        known = ", ".join(map(str, caps.gguf_versions))
        problems.append(f"GGUF version {version} is not supported by this llama-server build "
                        f"(it reads versions {known}); re-convert the model with a current llama.cpp")
    if architecture is None:
        problems.append("the GGUF metadata has no general.architecture; the file is not a llama.cpp model")
    elif architecture not in caps.architectures:
        problems.append(f"architecture {architecture!r} is unknown to this llama-server build; "
                        "upgrade the engine or use a vllm/sglang profile")
    for type_id in sorted(types):
        if type_id not in caps.tensor_types:
            problems.append(f"tensor type {type_id} (used by {', '.join(types[type_id])}) is not supported by "
                            "this llama-server build; re-quantize the model to a supported type")
    return problems


def header_problems(header: GgufHeader, caps: EngineCaps) -> list[str]:
    return servable_problems(header.version, header.architecture, tensor_types(header), caps)
