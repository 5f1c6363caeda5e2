#!/usr/bin/env python3
"""chorus against llama.cpp's own tools, side by side in one run, on the same GGUF and threads.

The peers are llama.cpp's native `llama-bench` (tg128, pp512) and `llama-batched-bench`
(pp128 + tg64 per sequence, N sequences at once), built by tools/bench/build_llamacpp.sh from the
llama.cpp tree of the pinned llama-cpp-python source distribution. For each model the script
alternates chorus and the peers for --rounds rounds, so machine noise hits both, and prints
each round's ratios and their medians:

  decode x1    `chorus bench` tg128 / `llama-bench` tg128 (1 sequence)
  pp512        `chorus bench` pp512 / `llama-bench` pp512
  decode xN    `chorus bench --prompt 128 --tg 64` aggregate decode of N sequences /
               `llama-batched-bench -npp 128 -ntg 64 -npl N` S_TG (its aggregate decode speed)

llama.cpp runs with its defaults for everything but threads (f16 KV cache, flash attention
off); chorus with its own (f32 KV cache), or with --kv-type f16 the same cache type as llama.cpp.
Needs only Python 3 (no packages).

Usage (from the repository root, after scripts/setup.sh):
  python3 tools/bench/bench_native.py [--models A.gguf,B.gguf] [--threads 2] [--rounds 3]
      [--seqs 8,16] [--kv-type f32|f16] [--bin DIR] [--markdown OUT.md] [--json OUT.json]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from common import DEFAULT_CHORUS, DEFAULT_MODEL, HERE, cpu_model
from common import chorus_bench as run_chorus_bench


def chorus_bench(args, model, extra, tmp):
    return run_chorus_bench(args.chorus, model, args.threads, args.reps, extra + ["--kv-type", args.kv_type],
                            os.path.join(tmp, "chorus.json"))


def llama_bench(args, model):
    """tg128 and pp512 tok/s from llama-bench's JSON."""
    cmd = [os.path.join(args.bin, "llama-bench"), "-m", model, "-t", str(args.threads), "-p", "512", "-n", "128",
           "-r", str(args.reps), "-o", "json"]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = json.loads(res.stdout)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == 128 and r["n_prompt"] == 0)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == 512 and r["n_gen"] == 0)
    return tg, pp


def batched_bench(args, model, seqs):
    """S_TG (aggregate decode tok/s) per sequence count, from llama-batched-bench's table."""
    n_ctx = max(seqs) * (128 + 64) + 64
    cmd = [os.path.join(args.bin, "llama-batched-bench"), "-m", model, "-t", str(args.threads), "-c", str(n_ctx),
           "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "64", "-npl", ",".join(map(str, seqs))]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    header, out = None, {}
    for line in res.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "S_TG t/s" in cells:
            header = cells
            continue
        if header and len(cells) == len(header) and re.fullmatch(r"\d+", cells[header.index("B")]):
            out[int(cells[header.index("B")])] = float(cells[header.index("S_TG t/s")])
    missing = [n for n in seqs if n not in out]
    if missing:
        sys.exit(f"bench_native: llama-batched-bench printed no row for {missing}:\n{res.stdout}\n{res.stderr}")
    return out


def one_round(args, model, seqs, tmp):
    single = chorus_bench(args, model, ["--pp", "512", "--tg", "128", "--seqs", "1"], tmp)
    tg, pp = llama_bench(args, model)
    batched = chorus_bench(args, model, ["--pp", "0", "--prompt", "128", "--tg", "64", "--seqs",
                                         ",".join(map(str, seqs))], tmp)
    peer_batched = batched_bench(args, model, seqs)
    row = {"chorus_tg128": single["decode"][0]["tok_s"], "llama_bench_tg128": tg,
           "chorus_pp512": single["pp"]["tok_s"], "llama_bench_pp512": pp, "batched": {}}
    for d in batched["decode"]:
        n = d["sequences"]
        row["batched"][n] = {"chorus": d["tok_s"], "llama": peer_batched[n]}
    return row


def report(args, model, rounds, seqs):
    med = lambda f: statistics.median(f(r) for r in rounds)
    name = os.path.basename(model)
    lines = [
        f"### {name}",
        "",
        f"CPU: {cpu_model()}, {args.threads} threads; chorus's KV cache {args.kv_type}, llama.cpp's f16; "
        f"{len(rounds)} alternating rounds, best of {args.reps} "
        "runs per test per round (llama-bench: mean of its -r runs); medians:",
        "",
        "| test | chorus tok/s | llama.cpp tok/s | ratio |",
        "|---|---|---|---|",
        f"| decode, 1 sequence (tg128) vs llama-bench | {med(lambda r: r['chorus_tg128']):.1f} | "
        f"{med(lambda r: r['llama_bench_tg128']):.1f} | "
        f"**{med(lambda r: r['chorus_tg128'] / r['llama_bench_tg128']):.2f}x** |",
        f"| prompt processing (pp512) vs llama-bench | {med(lambda r: r['chorus_pp512']):.1f} | "
        f"{med(lambda r: r['llama_bench_pp512']):.1f} | "
        f"**{med(lambda r: r['chorus_pp512'] / r['llama_bench_pp512']):.2f}x** |",
    ]
    for n in seqs:
        lines.append(
            f"| aggregate decode, {n} sequences (pp128 + tg64 each) vs llama-batched-bench | "
            f"{med(lambda r: r['batched'][n]['chorus']):.1f} | {med(lambda r: r['batched'][n]['llama']):.1f} | "
            f"**{med(lambda r: r['batched'][n]['chorus'] / r['batched'][n]['llama']):.2f}x** |")
    per_round = ", ".join(
        "(" + ", ".join([f"{r['chorus_tg128'] / r['llama_bench_tg128']:.2f}",
                         f"{r['chorus_pp512'] / r['llama_bench_pp512']:.2f}"] +
                        [f"{r['batched'][n]['chorus'] / r['batched'][n]['llama']:.2f}" for n in seqs]) + ")"
        for r in rounds)
    lines += ["", f"Per round (tg128, pp512, " + ", ".join(f"x{n}" for n in seqs) + "): " + per_round, ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default=DEFAULT_CHORUS)
    ap.add_argument("--models", default=DEFAULT_MODEL, help="comma-separated GGUF files")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seqs", default="8,16", help="sequence counts for the batched comparison")
    ap.add_argument("--kv-type", default="f32", choices=["f32", "f16"], help="chorus's KV cache (llama.cpp's is f16)")
    ap.add_argument("--bin", default=None, help="llama.cpp tools (default: build_llamacpp.sh's, built if missing)")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    if args.bin is None:
        res = subprocess.run(["bash", os.path.join(HERE, "build_llamacpp.sh")], check=True, capture_output=True,
                             text=True)
        args.bin = res.stdout.strip().splitlines()[-1]
    seqs = [int(x) for x in args.seqs.split(",") if x]
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if not os.path.exists(m):
            sys.exit(f"bench_native: no such model file: {m}")
    texts, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            rounds = []
            for r in range(args.rounds):
                row = one_round(args, model, seqs, tmp)
                rounds.append(row)
                print(f"{os.path.basename(model)} round {r + 1}: tg128 {row['chorus_tg128'] / row['llama_bench_tg128']:.2f}x, "
                      f"pp512 {row['chorus_pp512'] / row['llama_bench_pp512']:.2f}x, " +
                      ", ".join(f"x{n} {row['batched'][n]['chorus'] / row['batched'][n]['llama']:.2f}x" for n in seqs),
                      flush=True)
            results[model] = rounds
            texts.append(report(args, model, rounds, seqs))
    text = "\n".join(texts)
    print()
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_model(), "threads": args.threads, "kv_type": args.kv_type, "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
