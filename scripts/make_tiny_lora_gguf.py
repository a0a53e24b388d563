#!/usr/bin/env python3
"""Write a tiny random LoRA adapter, in llama.cpp's GGUF adapter format, for the tiny model.

Usage: python make_tiny_lora_gguf.py [OUT_PATH] [--seed N] [--rank R]

The base is what make_tiny_gguf.py writes (llama architecture, 2 layers, hidden 64,
2 KV heads of 16, FFN 128, vocabulary 579). The adapter holds, for every attention and
FFN projection of each layer and for the output layer, `<tensor>.lora_a` (rank x in) and
`<tensor>.lora_b` (out x rank), with the metadata llama.cpp's loader checks:
`general.type = adapter`, `general.architecture = llama` (must match the base),
`adapter.type = lora`, `adapter.lora.alpha`. Its weights are large enough that greedy
output with the adapter differs from the base's; different seeds give different adapters.
The input column of the base's "bias channel" (dim 0, which keeps control and byte tokens
out of the output) is left alone, so the adapted model still writes plain word pieces.
Only needs `numpy` and the `gguf` package.
"""
from __future__ import annotations

import argparse

import gguf
import numpy as np

# The tiny base's shapes (make_tiny_gguf.py): (out_features, in_features) per tensor.
N_LAYER, N_EMBD, N_FF, N_VOCAB = 2, 64, 128, 579
N_EMBD_KV = 32  # 2 KV heads of 16
SHAPES = {
    "attn_q": (N_EMBD, N_EMBD), "attn_k": (N_EMBD_KV, N_EMBD), "attn_v": (N_EMBD_KV, N_EMBD),
    "attn_output": (N_EMBD, N_EMBD), "ffn_gate": (N_FF, N_EMBD), "ffn_up": (N_FF, N_EMBD),
    "ffn_down": (N_EMBD, N_FF),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="tiny-lora.gguf")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rank", type=int, default=4)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    r = args.rank

    w = gguf.GGUFWriter(args.out, "llama")  # general.architecture: the base's, checked by llama.cpp
    w.add_type(gguf.GGUFType.ADAPTER)  # general.type = adapter
    w.add_name(f"tiny-random-lora-{args.seed}")
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(r))  # alpha / rank = 1: the deltas as written

    def pair(name: str, out_f: int, in_f: int, std: float) -> None:
        # numpy (rows, cols) is ggml's ne reversed: lora_a is ne [in, r], lora_b ne [r, out],
        # which is what llama.cpp's loader checks against the base tensor's [in, out].
        a = (rng.standard_normal((r, in_f)) * std).astype(np.float32)
        a[:, 0] = 0.0  # leave the bias channel's contribution as the base has it
        b = (rng.standard_normal((out_f, r)) * std).astype(np.float32)
        w.add_tensor(f"{name}.weight.lora_a", a)
        w.add_tensor(f"{name}.weight.lora_b", b)

    for i in range(N_LAYER):
        for t, (out_f, in_f) in SHAPES.items():
            pair(f"blk.{i}.{t}", out_f, in_f, 0.3)
    pair("output", N_VOCAB, N_EMBD, 0.6)  # the strongest lever on which token comes next

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: LoRA rank {r} for the tiny llama, seed {args.seed}")


if __name__ == "__main__":
    main()
