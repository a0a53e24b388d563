#!/usr/bin/env python3
"""The prefix benchmark's model: a random-weight llama GGUF big enough that prefill dominates.

    .venv/bin/python bench/prefix/model.py [--layers 4] [--embd 384] [--ff 1024] [--ctx 8192]

Written the way scripts/make-model writes the tiny one (scripts/make_tiny_gguf.py, its
vocabulary and its "never sample a control token" output layer), only wider and deeper,
to $LLMGW_CACHE/models/prefix-bench-<layers>x<embd>.gguf; the lab mounts that folder on
every host at /srv/models. Skips when the file exists. Prints the path.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache" / "llmgw"))


def model_path(layers: int, embd: int) -> Path:
    return CACHE / "models" / f"prefix-bench-{layers}x{embd}.gguf"


def make(layers: int = 4, embd: int = 384, ff: int = 1024, ctx: int = 8192) -> Path:
    out = model_path(layers, embd)
    if out.is_file() and out.stat().st_size > 0:
        return out
    spec = importlib.util.spec_from_file_location("make_tiny_gguf", REPO / "scripts" / "make_tiny_gguf.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    # The generator reads its shape from module constants: the same recipe, a larger model.
    gen.N_LAYER, gen.N_EMBD, gen.N_FF, gen.N_CTX = layers, embd, ff, ctx
    gen.N_HEAD, gen.N_HEAD_KV = max(1, embd // 64), max(1, embd // 128)
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    argv = sys.argv
    try:
        sys.argv = ["make_tiny_gguf.py", str(part), "--seed", "0"]
        gen.main()
    finally:
        sys.argv = argv
    part.replace(out)  # whole or not at all: a half-written model is never served
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--ctx", type=int, default=8192)
    args = ap.parse_args()
    if min(args.layers, args.embd, args.ff, args.ctx) < 1 or args.embd % 64:
        sys.exit("Error: --layers, --ff and --ctx must be positive and --embd a multiple of 64")
    print(make(args.layers, args.embd, args.ff, args.ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
