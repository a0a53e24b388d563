#!/usr/bin/env python3
"""Write a tiny random PEFT LoRA adapter for the tiny HF Llama (scripts/make_tiny_hf_llama.py).

usage: python make_tiny_peft_lora.py OUT_DIR [--seed N] [--rank R] [--base NAME]

What `peft` saves for a LoRA on q_proj and v_proj (adapter_config.json and
adapter_model.safetensors, keys `base_model.model.model.layers.N.self_attn.<proj>.lora_A.weight`
(rank x 256) and `.lora_B.weight` (256 x rank)), made with numpy and safetensors only. Its
weights are large enough that greedy output with it differs from the base's; seeded.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file

HIDDEN, LAYERS = 256, 2  # the tiny HF Llama's (4 heads of 64, as many KV heads)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--base", default="llmgw/tiny-llama")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    r = args.rank
    tensors = {}
    for i in range(LAYERS):
        for proj in ("q_proj", "v_proj"):
            key = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{key}.lora_A.weight"] = (rng.standard_normal((r, HIDDEN)) * 0.5).astype(np.float32)
            tensors[f"{key}.lora_B.weight"] = (rng.standard_normal((HIDDEN, r)) * 0.5).astype(np.float32)
    os.makedirs(args.out, exist_ok=True)
    save_file(tensors, os.path.join(args.out, "adapter_model.safetensors"))
    config = {"base_model_name_or_path": args.base, "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r,
              "lora_alpha": r, "lora_dropout": 0.0, "bias": "none", "target_modules": ["q_proj", "v_proj"],
              "fan_in_fan_out": False, "inference_mode": True, "modules_to_save": None}
    with open(os.path.join(args.out, "adapter_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)
        fh.write("\n")
    print(f"wrote {args.out}: PEFT LoRA rank {r} on q_proj, v_proj for {args.base}, seed {args.seed}")


if __name__ == "__main__":
    main()
