#!/usr/bin/env python3
"""Write what a llama.cpp build can load, read from the sources it was built from.

usage: engine-caps.py LLAMA_CPP_SRC OUT.json

The JSON (`llama-server.caps.json`, kept beside the binary) lists the GGUF versions,
model architectures and tensor types that build understands, so `llmgw catalog
validate` can refuse a model the fleet's llama-server cannot load before it is placed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def caps(src: Path) -> dict[str, object]:
    arch_cpp = (src / "src" / "llama-arch.cpp").read_text()
    names = arch_cpp[arch_cpp.index("LLM_ARCH_NAMES"):]
    names = names[: names.index("};")]
    architectures = sorted(set(re.findall(r'\{\s*LLM_ARCH_\w+\s*,\s*"([^"]+)"\s*\}', names)) - {"(unknown)", "clip"})
    # "clip" is a dummy entry used only by llama-quantize: llama-server cannot serve it.
    ggml_h = (src / "ggml" / "include" / "ggml.h").read_text()
    enum = ggml_h[ggml_h.index("enum ggml_type {"):]
    enum = enum[: enum.index("};")]
    types = {int(n): name.lower() for name, n in re.findall(r"^\s*GGML_TYPE_(\w+)\s*=\s*(\d+)", enum, re.M)
             if name != "COUNT"}
    gguf_h = (src / "ggml" / "include" / "gguf.h").read_text()
    version = int(re.search(r"#define\s+GGUF_VERSION\s+(\d+)", gguf_h).group(1))  # type: ignore[union-attr]
    # gguf.cpp refuses version 1 ("GGUFv1 is no longer supported") and anything newer than GGUF_VERSION.
    return {"gguf_versions": list(range(2, version + 1)), "architectures": architectures,
            "tensor_types": {str(k): v for k, v in sorted(types.items())}}


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: engine-caps.py LLAMA_CPP_SRC OUT.json")
    out = Path(sys.argv[2])
    out.write_text(json.dumps(caps(Path(sys.argv[1])), indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
