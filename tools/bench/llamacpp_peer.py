#!/usr/bin/env python3
"""Peer side of the chorus-vs-llama.cpp benchmark (llama.cpp via llama-cpp-python).

Measures, on the same GGUF and thread count chorus is benchmarked with:

  pp512   prompt processing: one llama_decode of a fixed 512-token prompt
          (n_batch = n_ubatch = 512, logits for the last token only);
          KV cache cleared before each run; 1 warm-up, best of --reps.
  decode  single-stream decode: after a 16-token prompt (not timed), 128
          single-token llama_decode calls; 1 warm-up, best of --reps.
          The warm-up run generates the 128 tokens greedily (argmax of the
          last logits); the timed runs feed that same fixed sequence, so only
          the decode calls are timed (no sampling/argmax in the timed region).

Token ids are deterministic: a fixed English paragraph, repeated, tokenized
with add_bos=False (SmolLM2 does not add BOS) and cut to exactly 512 ids; the
decode prompt is the first 16 of those ids.  Each timed region is
llama_decode + llama_synchronize, measured with time.perf_counter.

The KV cache type and flash attention are left at llama-cpp-python's defaults
(f16 K/V, flash attention disabled), as a user of the library would get them.

Usage:
  llamacpp_peer.py [MODEL] [--threads 2] [--json OUT] [--reps 3]
"""
import argparse
import json
import os
import sys
import time

from common import DEFAULT_MODEL

PP_TOKENS = 512
DECODE_PROMPT = 16
DECODE_TOKENS = 128

PARAGRAPH = (
    "The history of computing is a story of steady abstraction. Early machines "
    "were programmed by rewiring panels and flipping switches, and every change "
    "required hours of careful work. Stored-program computers made it possible to "
    "treat instructions as data, which in turn allowed assemblers, compilers and "
    "operating systems to be written. Each layer hid the details of the one below "
    "it, so that programmers could think about problems instead of circuits. "
    "Today a single line of code in a high-level language may expand into "
    "thousands of machine instructions, yet most developers never need to look "
    "at them. "
)


def bench_tokens(llm):
    text = PARAGRAPH
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    while len(ids) < PP_TOKENS:
        text += PARAGRAPH
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    return [int(t) for t in ids[:PP_TOKENS]]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", dest="json_out", default=None, help="write results here")
    ap.add_argument("--reps", type=int, default=3, help="timed runs per test (best is kept)")
    args = ap.parse_args()

    import numpy as np
    import llama_cpp as L

    t_start = time.perf_counter()
    llm = L.Llama(model_path=args.model, n_ctx=1024, n_batch=PP_TOKENS,
                  n_ubatch=PP_TOKENS, n_threads=args.threads,
                  n_threads_batch=args.threads, logits_all=False, verbose=False)
    ctx = llm._ctx.ctx
    mem = L.llama_get_memory(ctx)
    n_vocab = llm.n_vocab()
    type_k = int(llm.context_params.type_k)
    type_v = int(llm.context_params.type_v)
    kv_names = {0: "f32", 1: "f16", 8: "q8_0", 30: "bf16"}
    flash = int(llm.context_params.flash_attn_type)

    ids = bench_tokens(llm)

    def decode(tokens):
        arr = (L.llama_token * len(tokens))(*tokens)
        batch = L.llama_batch_get_one(arr, len(tokens))
        t0 = time.perf_counter()
        rc = L.llama_decode(ctx, batch)
        L.llama_synchronize(ctx)
        dt = time.perf_counter() - t0
        if rc != 0:
            raise RuntimeError("llama_decode returned %d" % rc)
        return dt

    def last_argmax():
        p = L.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(n_vocab,))))

    # (a) prompt processing
    pp_times = []
    for rep in range(args.reps + 1):
        L.llama_memory_clear(mem, True)
        dt = decode(ids)
        if rep > 0:
            pp_times.append(dt)

    # (b) single-stream decode
    prompt = ids[:DECODE_PROMPT]
    L.llama_memory_clear(mem, True)
    decode(prompt)
    gen = []
    for _ in range(DECODE_TOKENS):  # warm-up: greedy, defines the sequence
        gen.append(last_argmax())
        decode([gen[-1]])
    dec_times = []
    for rep in range(args.reps):
        L.llama_memory_clear(mem, True)
        decode(prompt)
        dec_times.append(sum(decode([t]) for t in gen))

    pp_best = min(pp_times)
    dec_best = min(dec_times)
    res = {
        "peer": "llama.cpp via llama-cpp-python %s" % L.__version__,
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "kv_type": kv_names.get(type_k, str(type_k)) if type_k == type_v
        else "%s/%s" % (kv_names.get(type_k, type_k), kv_names.get(type_v, type_v)),
        "flash_attn": {-1: "auto", 0: "off", 1: "on"}.get(flash, str(flash)),
        "n_batch": PP_TOKENS,
        "n_ubatch": PP_TOKENS,
        "pp512_tok_s": PP_TOKENS / pp_best,
        "decode_tok_s": DECODE_TOKENS / dec_best,
        "decode_feed": "fixed sequence = greedy continuation of the 16-token prompt "
                       "(computed in the warm-up run)",
        "runs": {
            "pp512_s": pp_times,
            "decode128_s": dec_times,
            "reps": args.reps,
            "warmup": 1,
        },
        "pp_prompt_ids": ids,
        "decode_prompt_ids": prompt,
        "decode_ids": gen,
        "system_info": L.llama_print_system_info().decode("utf-8", "replace").strip(),
        "loadavg_1m": os.getloadavg()[0],
    }

    print("%-28s %8s %10s %12s" % ("peer", "threads", "test", "tok/s"))
    print("%-28s %8d %10s %12.1f" % ("llama.cpp " + L.__version__, args.threads,
                                     "pp512", res["pp512_tok_s"]))
    print("%-28s %8d %10s %12.1f" % ("llama.cpp " + L.__version__, args.threads,
                                     "tg128", res["decode_tok_s"]))
    print("kv=%s flash_attn=%s; pp512 runs %s s; decode runs %s s; load avg %.2f; wall %.1fs"
          % (res["kv_type"], res["flash_attn"],
             ", ".join("%.3f" % t for t in pp_times),
             ", ".join("%.3f" % t for t in dec_times),
             res["loadavg_1m"], time.perf_counter() - t_start))

    if args.json_out:
        d = os.path.dirname(os.path.abspath(args.json_out))
        os.makedirs(d, exist_ok=True)
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        print("wrote %s" % args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
