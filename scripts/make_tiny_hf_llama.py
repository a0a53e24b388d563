#!/usr/bin/env python3
"""Write a tiny random Llama in Hugging Face format: safetensors, a BPE tokenizer, a chat template.

usage: python make_tiny_hf_llama.py OUT_DIR [--seed N]

The layout `transformers.LlamaForCausalLM.save_pretrained` writes (config.json,
generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
special_tokens_map.json), made with numpy, safetensors and tokenizers only: torch and
transformers are gigabytes, and the weights tests and the lab's mirror need only the files.

About 6 MB: 256 hidden, 4 heads (head dim 64: vLLM's CPU attention refuses 16), 2 layers,
a 512-token byte-level BPE vocabulary, float32. Seeded, so every machine writes the same
bytes. Its text is nonsense; vLLM loads and serves it like any other model.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HIDDEN, INTER, LAYERS, HEADS, VOCAB, CTX = 256, 512, 2, 4, 512, 1024
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def tokenizer(out: str) -> int:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(["hello world this is a tiny model for tests " * 5,
                             "the quick brown fox jumps over the lazy dog " * 5], trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])}
    _json(out, "tokenizer_config.json", {
        "added_tokens_decoder": added, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "extra_special_tokens": {},
        "model_max_length": CTX, "tokenizer_class": "PreTrainedTokenizerFast"})
    _json(out, "special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    return int(tok.get_vocab_size())


def weights(vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    t = {"model.embed_tokens.weight": normal(vocab, HIDDEN), "model.norm.weight": np.ones(HIDDEN, np.float32),
         "lm_head.weight": normal(vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for proj in ("q", "k", "v", "o"):
            t[f"{p}self_attn.{proj}_proj.weight"] = normal(HIDDEN, HIDDEN)
        t[f"{p}mlp.gate_proj.weight"] = normal(INTER, HIDDEN)
        t[f"{p}mlp.up_proj.weight"] = normal(INTER, HIDDEN)
        t[f"{p}mlp.down_proj.weight"] = normal(HIDDEN, INTER)
        t[f"{p}input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[f"{p}post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
    return t


def _json(out: str, name: str, doc: object) -> None:
    with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vocab = tokenizer(args.out)
    _json(args.out, "config.json", {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": HIDDEN // HEADS, "hidden_act": "silu",
        "hidden_size": HIDDEN, "initializer_range": 0.02, "intermediate_size": INTER,
        "max_position_embeddings": CTX, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": HEADS,
        "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True, "vocab_size": vocab})
    _json(args.out, "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    save_file(weights(vocab, args.seed), os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    print(args.out, sorted(os.listdir(args.out)))


if __name__ == "__main__":
    main()
