#!/usr/bin/env python3
"""Record llama.cpp logits for the tiny random-weight models.

For each of tiny_llama.gguf, tiny_qwen2.gguf, tiny_llama_f32.gguf, tiny_qwen3.gguf,
tiny_qwen35.gguf, tiny_qwen35moe.gguf, tiny_qwen3next_f32.gguf, tiny_llama_kq.gguf, the RoPE
variants and tiny_gemma3_f32.gguf (written by
make_tiny_models.py, in the same directory as --out):

  cases:  3 token-id sequences (lengths 1, 7, 40; ids uniform in [0, n_vocab),
          numpy seed SEED, the same ids for every model), each evaluated with
          llm.reset(); llm.eval(ids) -- token ids go straight in, no tokenizer.
          Recorded: the full logit vector of the last position.
  greedy: the length-40 sequence as prompt, then 16 greedy steps: logits of the
          last evaluated position, argmax (lowest id on ties), top1 - top2 gap,
          llm.eval([tok]).

llama_cpp.Llama(n_ctx=256, n_threads=2, n_batch=256, logits_all=True,
type_k=type_v=GGML_TYPE_F32 (0), flash_attn=False): f32 KV cache, no flash
attention. Floats are written as the shortest decimal that round-trips to the
float32 value llama.cpp produced.

Usage:
  dequantized_cases (DEQUANTIZED models only): the same cases on a copy of the file with every
          tensor dequantized to F32 by the gguf package, under the same settings.

  make_tiny_goldens.py [--out tests/goldens/tiny_models.json] [--only a.gguf,b.gguf] [--kv f32|f16]
(--only records those models and keeps the other entries of --out as they are. --kv f16 records
the F16_MODELS with an f16 KV cache, type_k = type_v = GGML_TYPE_F16 (1), into
tests/goldens/tiny_models_kvf16.json.)
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from golden_common import sha256_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_OUT = os.path.join(REPO, "tests", "goldens", "tiny_models.json")

MODELS = ["tiny_llama.gguf", "tiny_qwen2.gguf", "tiny_llama_f32.gguf", "tiny_qwen3.gguf",
          "tiny_qwen35.gguf", "tiny_qwen35moe.gguf", "tiny_qwen3next_f32.gguf", "tiny_llama_kq.gguf",
          "tiny_llama3_rope_f32.gguf", "tiny_llama_yarn_f32.gguf", "tiny_gemma3_f32.gguf", "tiny_llama_iq4.gguf",
          "tiny_llama_q23k.gguf"]
LENGTHS = [1, 7, 40]
SEED = 20240601
N_GREEDY = 16
N_THREADS = 2
N_CTX = 256
N_BATCH = 256
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
KV_TYPE = GGML_TYPE_F32  # --kv f16: GGML_TYPE_F16
# The models recorded with --kv f16 (f32 matrices: no int8 activations, so the two caches'
# difference is the KV rounding alone).
F16_MODELS = ["tiny_llama_f32.gguf", "tiny_gemma3_f32.gguf", "tiny_qwen3next_f32.gguf"]


def f32(x):
    """Shortest decimal that round-trips to float32 x, as a Python float."""
    return float(str(np.float32(x)))


def last_logits(llm):
    # With logits_all=True, Llama.eval fills llm.scores for every position.
    return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)


# Models whose weights are quantized with int8 activations that differ from llama.cpp's (the
# k-quants: llama.cpp reads them with per-256 activation scales, chorus with per-32): their
# logits are also recorded from a copy with every tensor dequantized to F32 (gguf's
# dequantizer), the exact arithmetic both must approach.
DEQUANTIZED = ["tiny_llama_kq.gguf", "tiny_llama_iq4.gguf", "tiny_llama_q23k.gguf"]


def dequantized_copy(path, out):
    import gguf
    r = gguf.GGUFReader(path)
    w = gguf.GGUFWriter(out, str(r.fields["general.architecture"].contents()))
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), f.types[0], sub_type=f.types[1])
        else:
            w.add_key_value(f.name, f.contents(), f.types[0])
    for t in r.tensors:
        w.add_tensor(t.name, gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def open_llm(path):
    import llama_cpp
    return llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                           n_batch=N_BATCH, logits_all=True, type_k=KV_TYPE, type_v=KV_TYPE,
                           flash_attn=False, seed=0, verbose=False)


def run_case(llm, ids):
    llm.reset()
    llm.eval(ids)
    return last_logits(llm)


def greedy(llm, prompt, n_steps):
    llm.reset()
    llm.eval(prompt)
    ids, gaps = [], []
    for _ in range(n_steps):
        logits = last_logits(llm)
        tok = int(np.argmax(logits))  # lowest index among ties
        rest = np.delete(logits, tok)
        ids.append(tok)
        gaps.append(float(np.float32(logits[tok] - rest.max())))
        llm.eval([tok])
    return ids, gaps


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--models-dir", default=None,
                    help="directory with the .gguf files (default: the --out directory)")
    ap.add_argument("--kv", default="f32", choices=["f32", "f16"],
                    help="the KV cache's type; f16 records F16_MODELS into tiny_models_kvf16.json by default")
    ap.add_argument("--only", default=None,
                    help="comma-separated models to record; the others keep their entries in --out")
    args = ap.parse_args()
    models_dir = args.models_dir or os.path.dirname(os.path.abspath(args.out))
    global KV_TYPE
    if args.kv == "f16":
        KV_TYPE = GGML_TYPE_F16
        if args.out == DEFAULT_OUT:
            args.out = DEFAULT_OUT.replace(".json", "_kvf16.json")
        if not args.only:
            args.only = ",".join(F16_MODELS)

    import llama_cpp

    t_start = time.perf_counter()
    out_models = {}
    raw = {}
    only = args.only.split(",") if args.only else MODELS
    for name in only:
        path = os.path.join(models_dir, name)
        t0 = time.perf_counter()
        llm = open_llm(path)
        n_vocab = int(llm.n_vocab())
        rng = np.random.default_rng(SEED)
        seqs = [[int(t) for t in rng.integers(0, n_vocab, size=n)] for n in LENGTHS]

        cases = []
        raw[name] = []
        for ids in seqs:
            logits = run_case(llm, ids)
            assert np.isfinite(logits).all(), (name, len(ids))
            raw[name].append(logits)
            cases.append({"ids": ids, "last_logits": [f32(v) for v in logits]})
        g_ids, g_gaps = greedy(llm, seqs[-1], N_GREEDY)

        # Determinism: llama.cpp on CPU with a fixed thread count should repeat
        # itself bit for bit.
        again = run_case(llm, seqs[-1])
        if not np.array_equal(again, raw[name][-1]) or greedy(llm, seqs[-1], N_GREEDY)[0] != g_ids:
            print("WARNING: %s: re-run gave different results" % name, file=sys.stderr)

        out_models[name] = {
            "sha256": sha256_file(path),
            "n_vocab": n_vocab,
            "cases": cases,
            "greedy": {"prompt": seqs[-1], "ids": g_ids, "top2_gap": [f32(g) for g in g_gaps]},
        }
        if name in DEQUANTIZED:
            import tempfile
            with tempfile.TemporaryDirectory() as tmp:
                copy = os.path.join(tmp, "f32.gguf")
                dequantized_copy(path, copy)
                ref = open_llm(copy)
                exact = [run_case(ref, ids) for ids in seqs]
                del ref
            out_models[name]["dequantized_cases"] = [{"ids": ids, "last_logits": [f32(v) for v in l]}
                                                     for ids, l in zip(seqs, exact)]
            for ids, l, e in zip(seqs, raw[name], exact):
                print("  %s, %2d tokens: llama.cpp vs its dequantized copy: max |dlogit| %.4f (max |logit| %.3f)" % (
                    name, len(ids), np.abs(l - e).max(), np.abs(e).max()))
        stds = " ".join("%.3f" % l.std() for l in raw[name])
        print("%-20s n_vocab %d  logit std [%s]  greedy %s  min gap %.4f  %.2fs" % (
            name, n_vocab, stds, g_ids, min(g_gaps), time.perf_counter() - t0))
        del llm

    # Same float weights, same ids: the Q8_0 model vs its F32 original.
    if "tiny_llama.gguf" in raw and "tiny_llama_f32.gguf" in raw:
        for n, a, b in zip(LENGTHS, raw["tiny_llama.gguf"], raw["tiny_llama_f32.gguf"]):
            print("tiny_llama Q8_0 vs F32, %2d tokens: max |dlogit| %.4f" % (n, np.abs(a - b).max()))

    out = {
        "generator": "llama-cpp-python %s" % llama_cpp.__version__,
        "kv_type": args.kv,
        "flash_attn": False,
        "n_threads": N_THREADS,
        "n_ctx": N_CTX,
        "n_batch": N_BATCH,
        "seed": SEED,
        "models": out_models,
    }
    if args.only and os.path.exists(args.out):  # keep the models not recorded now, in MODELS order
        with open(args.out, "r", encoding="utf-8") as f:
            kept = json.load(f)["models"]
        out["models"] = {n: out_models[n] if n in out_models else kept[n] for n in MODELS if n in out_models or n in kept}
        out_models = out["models"]

    # Layout: one case per line.
    lines = [json.dumps({k: v for k, v in out.items() if k != "models"})[:-1] + ', "models": {']
    mparts = []
    for name, m in out_models.items():
        s = '%s: {"sha256": %s, "n_vocab": %d, "cases": [\n' % (
            json.dumps(name), json.dumps(m["sha256"]), m["n_vocab"])
        s += ",\n".join(json.dumps(c, separators=(",", ":")) for c in m["cases"])
        s += '\n], "greedy": %s' % json.dumps(m["greedy"], separators=(",", ":"))
        if "dequantized_cases" in m:
            s += ', "dequantized_cases": [\n' + ",\n".join(
                json.dumps(c, separators=(",", ":")) for c in m["dequantized_cases"]) + "\n]"
        s += "}"
        mparts.append(s)
    text = lines[0] + "\n" + ",\n".join(mparts) + "\n}}\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    with open(args.out, "r", encoding="utf-8") as f:
        back = json.load(f)
    assert back == json.loads(json.dumps(out))
    for name in raw:  # floats survive the round trip exactly as float32
        for c, l in zip(back["models"][name]["cases"], raw[name]):
            assert np.array_equal(np.array(c["last_logits"], dtype=np.float32), l)
    print("wrote %s (%d bytes) in %.2fs" % (args.out, os.path.getsize(args.out),
                                           time.perf_counter() - t_start))


if __name__ == "__main__":
    sys.exit(main())
