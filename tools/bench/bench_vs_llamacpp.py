#!/usr/bin/env python3
"""chorus vs llama.cpp, side by side in one run, on the same GGUF and thread count.

Alternates the two (chorus, peer, chorus, peer, ...) for --rounds rounds so that machine noise
hits both, and reports ratios per round and their median:

  decode x1   single-stream decode tok/s, chorus / llama.cpp      (issue goal >= 1.2, floor 1.0)
  pp512       prompt processing tok/s, chorus / llama.cpp          (goal >= 1.0)
  decode x8   chorus aggregate decode at 8 sequences / chorus x1   (goal >= 4)

Usage (from the repository root, after scripts/setup.sh and the goldens venv of
tools/goldens/README.md):
  ~/.cache/chorus/venv-goldens/bin/python tools/bench/bench_vs_llamacpp.py [--threads 2] [--rounds 3]
      [--chorus build/chorus] [--model PATH] [--markdown OUT.md] [--json OUT.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from common import DEFAULT_CHORUS, DEFAULT_MODEL, HERE, chorus_bench, cpu_model


def run_chorus(args, out):
    return chorus_bench(args.chorus, args.model, args.threads, args.reps,
                        ["--pp", "512", "--tg", "128", "--seqs", args.seqs], out)


def run_peer(args, out):
    cmd = [sys.executable, os.path.join(HERE, "llamacpp_peer.py"), args.model, "--threads", str(args.threads),
           "--reps", str(args.reps), "--json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default=DEFAULT_CHORUS)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seqs", default="1,2,4,8,16")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()

    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            c = run_chorus(args, os.path.join(tmp, "c.json"))
            p = run_peer(args, os.path.join(tmp, "p.json"))
            dec = {d["sequences"]: d["tok_s"] for d in c["decode"]}
            row = {
                "chorus_decode_x1": dec[1], "peer_decode_x1": p["decode_tok_s"],
                "chorus_pp512": c["pp"]["tok_s"], "peer_pp512": p["pp512_tok_s"],
                "chorus_decode": dec,
            }
            row["ratio_decode_x1"] = row["chorus_decode_x1"] / row["peer_decode_x1"]
            row["ratio_pp512"] = row["chorus_pp512"] / row["peer_pp512"]
            if 8 in dec:
                row["ratio_x8_over_x1"] = dec[8] / dec[1]
            rounds.append(row)
            print(f"round {r + 1}: decode x1 {row['chorus_decode_x1']:.1f} vs {row['peer_decode_x1']:.1f} tok/s "
                  f"({row['ratio_decode_x1']:.2f}x), pp512 {row['chorus_pp512']:.1f} vs {row['peer_pp512']:.1f} "
                  f"({row['ratio_pp512']:.2f}x)", flush=True)

    med = lambda k: statistics.median(r[k] for r in rounds)
    seqs = sorted(rounds[0]["chorus_decode"].keys())
    lines = [
        f"CPU: {cpu_model()}, {args.threads} threads, model {os.path.basename(args.model)}, "
        f"{args.rounds} alternating rounds, best of {args.reps} runs per test per round; medians:",
        "",
        "| test | chorus tok/s | llama.cpp tok/s | ratio |",
        "|---|---|---|---|",
        f"| decode, 1 sequence (tg128) | {med('chorus_decode_x1'):.1f} | {med('peer_decode_x1'):.1f} | "
        f"**{med('ratio_decode_x1'):.2f}x** |",
        f"| prompt processing (pp512) | {med('chorus_pp512'):.1f} | {med('peer_pp512'):.1f} | "
        f"**{med('ratio_pp512'):.2f}x** |",
        "",
        "| chorus aggregate decode | " + " | ".join(f"x{n}" for n in seqs) + " |",
        "|---|" + "---|" * len(seqs),
        "| tok/s | " + " | ".join(f"{statistics.median(r['chorus_decode'][n] for r in rounds):.1f}" for n in seqs) + " |",
        "| vs 1 sequence | " + " | ".join(
            f"{statistics.median(r['chorus_decode'][n] / r['chorus_decode'][1] for r in rounds):.2f}x" for n in seqs) + " |",
        "",
        "Per round (decode x1 ratio, pp512 ratio): " + ", ".join(
            f"({r['ratio_decode_x1']:.2f}, {r['ratio_pp512']:.2f})" for r in rounds),
    ]
    text = "\n".join(lines)
    print()
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_model(), "threads": args.threads, "rounds": rounds}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
