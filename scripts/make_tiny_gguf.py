#!/usr/bin/env python3
"""Write a tiny random-weight llama-architecture GGUF model that llama.cpp loads.

Usage: python make_tiny_gguf.py [OUT_PATH] [--seed N]

- architecture "llama": 2 layers, hidden 64, 4 heads (GQA: 2 KV heads), FFN 128
- tokenizer: SentencePiece-style ("llama") vocab written straight into the GGUF
  metadata: <unk>/<s>/</s>, ChatML control tokens, 256 byte-fallback tokens
  <0x00>..<0xFF>, plus a few hundred word/char pieces; any UTF-8 text tokenizes
  (byte fallback), so no external tokenizer file is needed.
- a ChatML chat template in tokenizer.chat_template (used by llama-cpp-python's
  server for /v1/chat/completions).
- sampling never yields byte/control/EOS tokens: dim 0 of every token embedding
  is a large constant (a "bias channel" that survives RMS norm), and the output
  rows of non-NORMAL tokens get a large negative weight on that dim. So outputs
  are plain ASCII word pieces and generation always runs to max_tokens
  (finish_reason "length"). Pass --allow-eos to let </s> / <|im_end|> be sampled.
- all 21 tensors F32 (148K params, vocab 579); file is ~0.6 MB. Deterministic for a seed.
Only needs `numpy` and the `gguf` package (gguf-py) from PyPI.
"""
import argparse
import string

import gguf
import numpy as np

N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX = 2048
RMS_EPS = 1e-5

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Word pieces of the vocabulary, in the order their ids are assigned.
_WORDS_TEXT = (
    "the of and to in is it you that he was for on are with as I his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up use "
    "your how said an each she which do their time if will way about many then them write "
    "would like so these her long make thing see him two has look more day could go come did "
    "number sound no most people my over know water than call first who may down side been now "
    "find hello world test model token stream chat completion gateway proxy random tiny llama"
)
WORDS = _WORDS_TEXT.split()


def build_vocab():
    tokens, scores, types = [], [], []
    T = gguf.TokenType

    def add(piece, score, ttype):
        tokens.append(piece)
        scores.append(float(score))
        types.append(int(ttype))

    add("<unk>", 0.0, T.UNKNOWN)   # id 0
    add("<s>", 0.0, T.CONTROL)     # id 1 (BOS)
    add("</s>", 0.0, T.CONTROL)    # id 2 (EOS)
    add("<|im_start|>", 0.0, T.CONTROL)  # id 3
    add("<|im_end|>", 0.0, T.CONTROL)    # id 4 (EOT / end of chat turn)
    for b in range(256):            # byte fallback tokens, ids 5..260
        add(f"<0x{b:02X}>", 0.0, T.BYTE)
    pieces = ["\u2581"]             # "▁" = SentencePiece space marker
    pieces += list(string.ascii_letters + string.digits + string.punctuation)
    pieces += ["\u2581" + w for w in WORDS] + WORDS
    seen = set(tokens)
    score = -1.0
    for p in pieces:
        if p in seen:
            continue
        seen.add(p)
        # longer pieces get higher score so SPM merges prefer them
        add(p, score + len(p), T.NORMAL)
        score -= 0.01
    return tokens, scores, types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="tiny.gguf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--allow-eos", action="store_true",
                    help="do not suppress </s> and <|im_end|> in the output layer")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    tokens, scores, types = build_vocab()
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD
    n_embd_kv = head_dim * N_HEAD_KV

    w = gguf.GGUFWriter(args.out, "llama")  # writes general.architecture = llama
    w.add_name("tiny-random-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("llama")  # SentencePiece-style tokenizer in llama.cpp
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_eot_token_id(4)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def rnd(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # numpy shape is (rows=out_features, cols=in_features); gguf reverses to ggml ne.
    tok_embd = rnd(n_vocab, N_EMBD, std=1.0)
    tok_embd[:, 0] = 8.0  # constant "bias channel" carried by the residual stream
    w.add_tensor("token_embd.weight", tok_embd)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rnd(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", rnd(n_embd_kv, N_EMBD))
        w.add_tensor(p + "attn_v.weight", rnd(n_embd_kv, N_EMBD))
        w.add_tensor(p + "attn_output.weight", rnd(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rnd(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rnd(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", rnd(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    out_w = rnd(n_vocab, N_EMBD, std=1.0)
    out_w[:, 0] = 0.0
    suppress = [i for i, t in enumerate(types) if t != gguf.TokenType.NORMAL]
    if args.allow_eos:
        suppress = [i for i in suppress if i not in (2, 4)]
    out_w[suppress, 0] = -20.0  # logit offset ~ -100: never sampled
    w.add_tensor("output.weight", out_w)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: vocab={n_vocab} layers={N_LAYER} embd={N_EMBD} heads={N_HEAD}/{N_HEAD_KV}")


if __name__ == "__main__":
    main()
