#!/usr/bin/env python3
"""Record greedy-generation goldens from llama.cpp (via llama-cpp-python).

For each of 12 fixed prompts (6 ChatML chat prompts, 6 plain continuations):

  llm.reset(); llm.eval(prompt_ids)
  64 times: logits = llm.scores[llm.n_tokens - 1]   (last evaluated position)
            tok = argmax(logits); record top1 - top2 logit gap
            llm.eval([tok])

Generation never stops at an end token; the index of the first end token
(id 2 <|im_end|> or 0 <|endoftext|>) is recorded as "first_end".  For three
prompts the full logit vector of the first generated position is stored as
base64 of little-endian float32.

The KV cache is f32 (type_k = type_v = GGML_TYPE_F32 = 0) and flash attention
is off, so the reference is as close to exact f32 math as llama.cpp gets. With --kv f16 the
cache is f16 (GGML_TYPE_F16 = 1, llama.cpp's default), flash attention still off: the golden
of chorus's f16 KV cache (tests/goldens/generate_smollm_kvf16.json).

With --set gemma3 (Gemma 3 270M, the pretrained base model, fetched by scripts/setup.sh
--with-gemma): 6 plain prompts tokenized with BOS (the file's add_bos_token), 32 steps, end ids
1 <eos> and 106 <end_of_turn>, and instead of whole logit vectors (262,144 floats) the 256 largest
logits of the first generated position with their ids ("first_top"). Its quantized matrices are
read by llama.cpp with int8 activations, so the same prompts also run on a temporary copy of the
file with every tensor dequantized to F32 (make_tiny_goldens.dequantized_copy): "exact_top" holds
those logits at the same 256 ids, the exact arithmetic of the file's weights. The smollm set
records the same two for every prompt (and whole first logits for three): chorus's default
kernels sum the Q4_1 and Q8_0 products in another order than llama.cpp, and are held to being no
farther from the exact arithmetic than llama.cpp is, over the twelve prompts (the mean and the
largest distance; on a single prompt either may be the nearer).

Usage:
  make_generation_goldens.py [MODEL] [--out tests/goldens/generate_smollm.json] [--set smollm|gemma3]
                             [--kv f32|f16]
"""
import argparse
import base64
import json
import os
import sys
import time

import numpy as np

from golden_common import sha256_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHORUS_HOME = os.environ.get("CHORUS_HOME", os.path.expanduser("~/.cache/chorus"))
DEFAULT_MODEL = os.path.join(CHORUS_HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(REPO, "tests", "goldens", "generate_smollm.json")

N_STEPS = 64
N_THREADS = 2
END_IDS = (2, 0)  # <|im_end|>, <|endoftext|>
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(question):
    return ("<|im_start|>system\n" + SYSTEM + "<|im_end|>\n"
            "<|im_start|>user\n" + question + "<|im_end|>\n"
            "<|im_start|>assistant\n")


LONG_PROSE = (
    "The old lighthouse stood at the edge of the cliff for more than a century, "
    "its white paint slowly peeling under the constant assault of salt and wind. "
    "Every evening, the keeper climbed the one hundred and twelve steps of the "
    "spiral staircase, carrying a small tin of oil and a worn leather notebook in "
    "which he recorded the weather, the passing ships, and the occasional strange "
    "light he could not explain. The villagers below considered him a quiet, "
    "slightly eccentric man, but they trusted him completely, because in all the "
    "years he had tended the lamp, not a single vessel had been lost on the rocks "
    "that guarded the harbor. One stormy night in late November, as the rain "
    "hammered against the glass and the beam swept across the churning water, he "
    "noticed something that made him put down his pen and"
)

# (name, chat, text-or-question, first_logits)
PROMPTS = [
    ("chat_capital", True, "What is the capital of France?", True),
    ("chat_poem", True, "Write a short poem about the ocean.", False),
    ("chat_math", True,
     "A farmer has 12 apples. He gives 3 apples to each of his 2 neighbors "
     "and then buys 5 more. How many apples does he have now?", True),
    ("chat_photosynthesis", True, "Explain photosynthesis briefly.", False),
    ("chat_translate", True,
     "Translate the following sentence to French: \"The weather is beautiful today "
     "and I would like to go for a walk in the park.\"", False),
    ("chat_python", True,
     "Write a Python function that checks whether a string is a palindrome.", False),
    ("plain_fox", False, "The quick brown fox", True),
    ("plain_once", False, "Once upon a time,", False),
    ("plain_fibonacci", False, "def fibonacci(n):\n", False),
    ("plain_list", False, "1, 2, 3, 4,", False),
    ("plain_long_prose", False, LONG_PROSE, False),
    ("plain_german", False,
     "Die Sonne ging langsam hinter den Bergen unter, und die Kinder", False),
]


# Gemma 3 270M is a base model: continuations, no chat template.
GEMMA_PROMPTS = [
    ("plain_fox", False, "The quick brown fox", True),
    ("plain_capital", False, "The capital of France is", True),
    ("plain_fibonacci", False, "def fibonacci(n):\n", True),
    ("plain_list", False, "1, 2, 3, 4,", False),
    ("plain_long_prose", False, LONG_PROSE, False),
    ("plain_german", False, "Die Sonne ging langsam hinter den Bergen unter, und die Kinder", False),
]

SETS = {
    # name: (prompts, steps, end ids, add BOS, logits stored as "b64" or top-k "top")
    "smollm": (PROMPTS, N_STEPS, END_IDS, False, "b64"),
    "gemma3": (GEMMA_PROMPTS, 32, (1, 106), True, "top"),
}
TOP_K = 256


def generate(llm, prompt_ids, n_steps):
    """Greedy decode; returns (ids, gaps, first_logits)."""
    llm.reset()
    llm.eval(prompt_ids)
    ids, gaps, first = [], [], None
    for step in range(n_steps):
        # With logits_all=True, Llama.eval copies every position's logits into
        # llm.scores; row n_tokens - 1 is the last evaluated position.
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        if step == 0:
            first = logits.copy()
        top2 = np.argpartition(logits, -2)[-2:]
        tok = int(np.argmax(logits))  # lowest index among ties
        other = int(top2[0] if top2[1] == tok else top2[1])
        ids.append(tok)
        gaps.append(float(logits[tok]) - float(logits[other]))
        llm.eval([tok])
    return ids, gaps, first


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=None, help="default tests/goldens/generate_smollm.json "
                    "(generate_smollm_kvf16.json with --kv f16)")
    ap.add_argument("--kv", default="f32", choices=["f32", "f16"], help="the KV cache's type")
    ap.add_argument("--set", default="smollm", choices=sorted(SETS))
    args = ap.parse_args()
    prompt_set, n_steps, end_ids, add_bos, logits_form = SETS[args.set]
    if args.out is None:
        args.out = DEFAULT_OUT if args.kv == "f32" else DEFAULT_OUT.replace(".json", "_kvf16.json")
    kv_id = GGML_TYPE_F32 if args.kv == "f32" else GGML_TYPE_F16

    import llama_cpp

    t_start = time.perf_counter()
    kw = dict(model_path=args.model, n_ctx=1024, n_threads=N_THREADS,
              n_threads_batch=N_THREADS, n_batch=512, logits_all=True,
              verbose=False, seed=0, flash_attn=False)
    kv_type = "f16"
    try:
        llm = llama_cpp.Llama(type_k=kv_id, type_v=kv_id, **kw)
        kv_type = args.kv
    except TypeError:  # older llama-cpp-python without type_k/type_v
        llm = llama_cpp.Llama(**kw)
    t_load = time.perf_counter() - t_start

    # The exact arithmetic: the same file dequantized to F32.
    import tempfile
    from make_tiny_goldens import dequantized_copy
    tmpdir = tempfile.mkdtemp()
    copy = os.path.join(tmpdir, "dequantized.gguf")
    dequantized_copy(args.model, copy)
    exact = llama_cpp.Llama(**dict(kw, model_path=copy, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32))

    prompts = []
    for name, chat, text, want_logits in prompt_set:
        full = chatml(text) if chat else text
        prompt_ids = llm.tokenize(full.encode("utf-8"), add_bos=add_bos, special=True)
        t0 = time.perf_counter()
        ids, gaps, first = generate(llm, prompt_ids, n_steps)
        dt = time.perf_counter() - t0
        first_end = next((i for i, t in enumerate(ids) if t in end_ids), None)
        entry = {
            "name": name,
            "chat": chat,
            "text": full,
            "prompt_ids": [int(t) for t in prompt_ids],
            "greedy_ids": ids,
            "top2_gap": [round(g, 6) for g in gaps],
            "first_end": first_end,
        }
        if want_logits and logits_form == "b64":
            entry["first_logits_b64"] = base64.b64encode(
                first.astype("<f4").tobytes()).decode("ascii")
        if want_logits or logits_form == "b64":  # the smollm set: the top and exact for every prompt
            top = np.argsort(-first, kind="stable")[:TOP_K]
            entry["first_top"] = [[int(i), float(first[i])] for i in top]
            exact.reset()
            exact.eval(prompt_ids)
            ex = np.array(exact.scores[exact.n_tokens - 1], dtype=np.float32)
            entry["exact_top"] = [float(ex[i]) for i in top]
            print("  %s: llama.cpp vs the dequantized copy over its top %d: max |dlogit| %.4f" % (
                name, TOP_K, float(np.max(np.abs(first[top] - ex[top])))))
        prompts.append(entry)
        text_out = llm.detokenize(ids[:first_end] if first_end is not None else ids)
        print("%-20s prompt=%4d  end@%-4s min_gap=%.4f  %.2fs  %r" % (
            name, len(prompt_ids), first_end, min(gaps), dt,
            text_out.decode("utf-8", "replace")[:60]))

    del exact
    import shutil
    shutil.rmtree(tmpdir)

    # Determinism check: re-run the first prompt; must match bit for bit.
    p0 = prompts[0]
    ids2, gaps2, first2 = generate(llm, p0["prompt_ids"], n_steps)
    deterministic = (ids2 == p0["greedy_ids"]
                     and [round(g, 6) for g in gaps2] == p0["top2_gap"]
                     and all(float(first2[i]) == v for i, v in p0.get("first_top", []))
                     and ("first_logits_b64" not in p0
                          or base64.b64encode(first2.astype("<f4").tobytes()).decode("ascii")
                          == p0["first_logits_b64"]))
    if not deterministic:
        print("WARNING: re-running %s gave different results" % p0["name"], file=sys.stderr)

    out = {
        "generator": "llama-cpp-python %s" % llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "n_threads": N_THREADS,
        "n_ctx": 1024,
        "n_batch": 512,
        "kv_type": kv_type,
        "flash_attn": False,
        "n_steps": n_steps,
        "end_ids": list(end_ids),
        "add_bos": add_bos,
        "logits_encoding": ("base64 of little-endian float32, n_vocab values" if logits_form == "b64"
                            else "first_top: the %d largest as [id, logit]" % TOP_K),
        "n_vocab": int(llm.n_vocab()),
        "prompts": prompts,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    # One prompt per line (like the tokenizer goldens) keeps diffs readable.
    header = {k: v for k, v in out.items() if k != "prompts"}
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False)[:-1] + ', "prompts": [\n')
        f.write(",\n".join(json.dumps(p, ensure_ascii=False, separators=(",", ":"))
                           for p in prompts))
        f.write("\n]}\n")
    with open(args.out, "r", encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(out))

    wall = time.perf_counter() - t_start
    gaps_all = [g for p in prompts for g in p["top2_gap"]]
    print("kv_type=%s  deterministic=%s  steps with gap<0.01: %d, <0.1: %d of %d" % (
        kv_type, deterministic, sum(g < 0.01 for g in gaps_all),
        sum(g < 0.1 for g in gaps_all), len(gaps_all)))
    print("wrote %s (%d bytes); load %.2fs, wall %.2fs" % (
        args.out, os.path.getsize(args.out), t_load, wall))
    return 0 if deterministic else 1


if __name__ == "__main__":
    sys.exit(main())
