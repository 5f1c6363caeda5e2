#!/usr/bin/env python3
"""Write a dense GGUF of a real model's shape with random weights, for speed measurements,
then quantize it with llama.cpp's own llama-quantize into the mixes people download.

Speed does not depend on the values, only on the shapes and storage types. The matrices are
written as F16 (normal, std 0.02), then `llama-quantize` (built by tools/bench/build_llamacpp.sh)
makes each requested type from that file, so the quantization mix (which tensors get Q6_K,
which fall back to Q5_0 because a row is not a multiple of 256, ...) is exactly llama.cpp's.
The logits are meaningless; do not use these files as goldens.

Shapes, from the released configs:

  qwen2.5-0.5b  qwen2: hidden 896, 24 layers, 14 / 2 heads of 64, FFN 4864, vocab 151936,
                q/k/v biases, tied output, rope base 1e6
  llama-3.2-1b  llama: hidden 2048, 16 layers, 32 / 8 heads of 64, FFN 8192, vocab 128256,
                tied output, rope base 5e5 (the llama3 rope scaling is left out: it does not
                change the speed)

The tokenizer is a byte-level BPE vocab (256 byte tokens) padded to the vocab size with
unreachable tokens.

Usage:
  make_dense_model.py --shape qwen2.5-0.5b --types Q4_K_M,Q5_K_M [--dir DIR] [--quantize BIN]
Prints the path of each file written, one per line. Files that exist are kept.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "goldens"))
from make_tiny_models import bytes_to_unicode  # noqa: E402

SHAPES = {
    "qwen2.5-0.5b": dict(arch="qwen2", n_embd=896, n_layer=24, n_head=14, n_head_kv=2, n_ff=4864,
                         n_vocab=151936, bias=True, rope_base=1e6, eps=1e-6, n_ctx=32768),
    "llama-3.2-1b": dict(arch="llama", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192,
                         n_vocab=128256, bias=False, rope_base=5e5, eps=1e-5, n_ctx=131072),
}


def write_f16(path, s, seed):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, s["arch"])
    w.add_name("bench %s (random weights)" % os.path.basename(path))
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    E, H, HKV = s["n_embd"], s["n_head"], s["n_head_kv"]
    hd = E // H
    w.add_context_length(s["n_ctx"])
    w.add_embedding_length(E)
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["eps"])
    n_vocab = s["n_vocab"]
    tokens = list(bytes_to_unicode().values()) + ["<|pad%d|>" % i for i in range(n_vocab - 258)]
    tokens += ["<|endoftext|>", "<|im_start|>"]
    types = [gguf.TokenType.NORMAL] * (n_vocab - 2) + [gguf.TokenType.CONTROL] * 2
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(["Ġ t", "h e", "Ġ a", "i n"])
    w.add_eos_token_id(n_vocab - 2)
    w.add_bos_token_id(n_vocab - 1)
    w.add_add_bos_token(False)

    def mat(name, n_in, n_out):
        w.add_tensor(name, (rng.standard_normal((n_out, n_in), dtype=np.float32) * 0.02).astype(np.float16))

    def vec(name, n, value=1.0):
        w.add_tensor(name, np.full(n, value, dtype=np.float32))

    mat("token_embd.weight", E, n_vocab)
    for i in range(s["n_layer"]):
        p = "blk.%d." % i
        vec(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", E, H * hd)
        mat(p + "attn_k.weight", E, HKV * hd)
        mat(p + "attn_v.weight", E, HKV * hd)
        if s["bias"]:
            vec(p + "attn_q.bias", H * hd, 0.0)
            vec(p + "attn_k.bias", HKV * hd, 0.0)
            vec(p + "attn_v.bias", HKV * hd, 0.0)
        mat(p + "attn_output.weight", H * hd, E)
        vec(p + "ffn_norm.weight", E)
        mat(p + "ffn_gate.weight", E, s["n_ff"])
        mat(p + "ffn_up.weight", E, s["n_ff"])
        mat(p + "ffn_down.weight", s["n_ff"], E)
    vec("output_norm.weight", E)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--types", default="Q4_K_M", help="comma-separated llama-quantize types, or F16")
    ap.add_argument("--dir", default=None, help="default: $CHORUS_HOME/models/bench")
    ap.add_argument("--quantize", default=None, help="llama-quantize binary (default: from build_llamacpp.sh)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    s = SHAPES[args.shape]
    home = os.environ.get("CHORUS_HOME", os.path.expanduser("~/.cache/chorus"))
    out_dir = args.dir or os.path.join(home, "models", "bench")
    os.makedirs(out_dir, exist_ok=True)
    f16 = os.path.join(out_dir, "%s-F16.gguf" % args.shape)
    if not os.path.exists(f16):
        t0 = time.time()
        write_f16(f16 + ".part", s, args.seed)
        os.replace(f16 + ".part", f16)
        print("wrote %s (%.2f GB) in %.0f s" % (f16, os.path.getsize(f16) / 1e9, time.time() - t0), file=sys.stderr)
    for t in [t for t in args.types.split(",") if t]:
        if t.upper() == "F16":
            print(f16)
            continue
        out = os.path.join(out_dir, "%s-%s.gguf" % (args.shape, t))
        if not os.path.exists(out):
            quantize = args.quantize
            if quantize is None:
                here = os.path.dirname(os.path.abspath(__file__))
                bin_dir = subprocess.run([os.path.join(here, "build_llamacpp.sh")], check=True, text=True,
                                         stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
                quantize = os.path.join(bin_dir, "llama-quantize")
            subprocess.run([quantize, f16, out + ".part", t, str(os.cpu_count() or 1)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.replace(out + ".part", out)
        print(out)


if __name__ == "__main__":
    sys.exit(main())
