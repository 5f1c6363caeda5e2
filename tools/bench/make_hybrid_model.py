#!/usr/bin/env python3
"""Write a Qwen3.5-shaped hybrid GGUF with random weights, for speed measurements.

Speed does not depend on the values, only on the shapes and storage types, so the
matrices are random Q8_0 blocks written directly (random int8 quants, one f16
scale per block) instead of quantizing float arrays: a 0.8B-shaped file takes
seconds. The logits are meaningless; do not use these files as goldens.

Shapes (qwen35 GGUF names), from the released configs:

  0.8b  hidden 1024, 24 layers (every 4th full attention), 8 / 2 heads of 256,
        Gated DeltaNet 16 key / 16 value heads of 128, conv 4, FFN 3584,
        vocab 248320, tied output, rope over 64 dims
  9b    hidden 4096, 32 layers, 16 / 4 heads of 256, GDN 16 / 32 heads of 128,
        FFN 12288, vocab 248320, untied output (about 9.5 GB as Q8_0)

The tokenizer is a byte-level BPE vocab (256 byte tokens) padded to the vocab size
with unreachable tokens, so chorus can tokenize text for its benchmarks.

Usage:
  make_hybrid_model.py [--shape 0.8b|9b] [--out PATH] [--seed N]
"""
import argparse
import os
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "goldens"))
from make_tiny_models import add_qwen35_header, bytes_to_unicode  # noqa: E402

COMMON = dict(n_rot=64, sections=[11, 11, 10, 0], state=128, conv_kernel=4, interval=4, n_ctx=32768,
              rope_base=1e7, eps=1e-6, n_vocab=248320)
SHAPES = {
    "0.8b": dict(COMMON, n_embd=1024, n_layer=24, n_head=8, n_head_kv=2, head_dim=256, n_k_heads=16,
                 n_v_heads=16, n_ff=3584, tied=True),
    "9b": dict(COMMON, n_embd=4096, n_layer=32, n_head=16, n_head_kv=4, head_dim=256, n_k_heads=16,
               n_v_heads=32, n_ff=12288, tied=False),
}


def q8_0(rng, rows, cols):
    """Random Q8_0 rows: per 32 values an f16 scale then 32 int8 quants."""
    assert cols % 32 == 0
    nb = rows * (cols // 32)
    blocks = np.empty((nb, 34), dtype=np.uint8)
    blocks[:, :2] = np.frombuffer(np.full(nb, 0.02 / 127, dtype=np.float16).tobytes(), dtype=np.uint8).reshape(nb, 2)
    blocks[:, 2:] = rng.integers(-127, 128, size=(nb, 32), dtype=np.int8).view(np.uint8)
    return blocks.reshape(rows, (cols // 32) * 34)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="0.8b", choices=sorted(SHAPES))
    ap.add_argument("--out", default=None, help="default: $CHORUS_HOME/models/bench-qwen35-<shape>.gguf")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    s = SHAPES[args.shape]
    home = os.environ.get("CHORUS_HOME", os.path.expanduser("~/.cache/chorus"))
    out = args.out or os.path.join(home, "models", "bench-qwen35-%s.gguf" % args.shape)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    w = gguf.GGUFWriter(out, "qwen35")
    w.add_name("bench-qwen35-%s (random weights)" % args.shape)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    key_dim, value_dim, conv_dim = add_qwen35_header(w, s)
    tokens = list(bytes_to_unicode().values()) + ["<|pad%d|>" % i for i in range(s["n_vocab"] - 258)] + ["<|endoftext|>", "<|im_start|>"]
    types = [gguf.TokenType.NORMAL] * (s["n_vocab"] - 2) + [gguf.TokenType.CONTROL] * 2
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(["Ġ t", "h e", "Ġ a", "i n"])
    w.add_eos_token_id(s["n_vocab"] - 2)
    w.add_bos_token_id(s["n_vocab"] - 1)
    w.add_add_bos_token(False)

    E = s["n_embd"]

    def mat(name, n_in, n_out):
        q = q8_0(rng, n_out, n_in)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=QT.Q8_0)

    def vec(name, n, value=1.0, noise=0.0):
        w.add_tensor(name, (value + rng.normal(0, noise, size=n)).astype(np.float32) if noise else
                     np.full(n, value, dtype=np.float32))

    mat("token_embd.weight", E, s["n_vocab"])
    for i in range(s["n_layer"]):
        p = "blk.%d." % i
        vec(p + "attn_norm.weight", E)
        if (i + 1) % s["interval"] != 0:
            mat(p + "attn_qkv.weight", E, conv_dim)
            mat(p + "attn_gate.weight", E, value_dim)
            mat(p + "ssm_beta.weight", E, s["n_v_heads"])
            mat(p + "ssm_alpha.weight", E, s["n_v_heads"])
            w.add_tensor(p + "ssm_conv1d.weight",
                         rng.normal(0, 0.5, size=(conv_dim, s["conv_kernel"])).astype(np.float32))
            vec(p + "ssm_dt.bias", s["n_v_heads"], 0.0, 0.5)
            w.add_tensor(p + "ssm_a", (-np.exp(rng.normal(0, 0.5, size=s["n_v_heads"]))).astype(np.float32))
            vec(p + "ssm_norm.weight", s["state"])
            mat(p + "ssm_out.weight", value_dim, E)
        else:
            hd = s["head_dim"]
            mat(p + "attn_q.weight", E, 2 * s["n_head"] * hd)
            mat(p + "attn_k.weight", E, s["n_head_kv"] * hd)
            mat(p + "attn_v.weight", E, s["n_head_kv"] * hd)
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
            mat(p + "attn_output.weight", s["n_head"] * hd, E)
        vec(p + "post_attention_norm.weight", E)
        mat(p + "ffn_gate.weight", E, s["n_ff"])
        mat(p + "ffn_up.weight", E, s["n_ff"])
        mat(p + "ffn_down.weight", s["n_ff"], E)
    vec("output_norm.weight", E)
    if not s["tied"]:
        mat("output.weight", E, s["n_vocab"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("%s: %.2f GB in %.1fs" % (out, os.path.getsize(out) / 1e9, time.time() - t0))


if __name__ == "__main__":
    sys.exit(main())
