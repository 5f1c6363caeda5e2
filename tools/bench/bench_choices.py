#!/usr/bin/env python3
"""n choices as forks of one prompt block vs n separate requests, side by side in one run.

The same prompt (a long system turn and a question, ~PROMPT tokens), the same sampling, against
one `chorus serve`: first one chat completion with `n` choices (the prompt runs once into a
block that is forked n - 1 times: pages shared), then `n` requests of one choice each, sent at
once (each its own one-shot program: the prompt runs n times, n blocks). Reported for each: the
peak KV pages of the pool in use (`chorus_pool_used_pages` in /metrics, polled every 10 ms), the
wall time, completion tokens per second, prompt tokens run; and the ratios. Repeated --reps
times, alternating, best of each.

  PY=~/.cache/chorus/venv-tests/bin/python
  $PY tools/bench/bench_choices.py --n 4 --max-tokens 96 --json /tmp/choices.json
"""
import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

import openai

from common import DEFAULT_CHORUS, DEFAULT_MODEL, cpu_model

SYSTEM = ("You are a careful assistant for a team that maintains a large build system. " * 6 +
          "Answer briefly, with one idea per sentence, and never repeat yourself. ")


def pool_pages(base):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        m = re.search(r"^chorus_pool_used_pages (\S+)$", r.read().decode(), re.M)
    return int(float(m.group(1))) if m else -1


class PeakPages:
    """Polls the pool's pages in use while a run goes."""

    def __init__(self, base):
        self.base, self.peak, self.stop = base, 0, False
        self.thread = threading.Thread(target=self.poll)

    def poll(self):
        while not self.stop:
            self.peak = max(self.peak, pool_pages(self.base))
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        self.thread.join()


def one_request(client, args, question):
    t = time.perf_counter()
    r = client.chat.completions.create(model="default", messages=question, max_tokens=args.max_tokens,
                                       temperature=1.0, seed=11, n=args.n)
    return time.perf_counter() - t, r.usage.completion_tokens, r.usage.prompt_tokens


def separate_requests(client, args, question):
    results = [None] * args.n

    def go(i):
        results[i] = client.chat.completions.create(model="default", messages=question, max_tokens=args.max_tokens,
                                                    temperature=1.0, seed=11 + i)

    t = time.perf_counter()
    threads = [threading.Thread(target=go, args=(i,)) for i in range(args.n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return (time.perf_counter() - t, sum(r.usage.completion_tokens for r in results),
            sum(r.usage.prompt_tokens for r in results))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default=DEFAULT_CHORUS)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()

    server = subprocess.Popen([args.chorus, "serve", "--model", args.model, "--port", "0", "--threads",
                               str(args.threads)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"http://([0-9.]+):(\d+)/v1", server.stdout.readline())
    if not m:
        sys.exit("chorus serve did not start")
    # Its log is read on (a full pipe would stall the server).
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
    base = "http://%s:%s" % (m.group(1), m.group(2))
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    question = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Name three ways to make an incremental build faster."}]
    rows = {"forks": [], "separate": []}
    try:
        one_request(client, args, question)  # warm-up
        for _ in range(args.reps):
            for name, run in (("forks", one_request), ("separate", separate_requests)):
                with PeakPages(base) as peak:
                    wall, completion, prompt = run(client, args, question)
                rows[name].append({"peak_pages": peak.peak, "wall_s": wall, "completion_tokens": completion,
                                   "prompt_tokens_run": prompt, "tok_per_s": completion / wall})
    finally:
        server.terminate()
        server.wait(timeout=20)
    # The median run of each (by tok/s).
    best = {k: sorted(v, key=lambda r: r["tok_per_s"])[len(v) // 2] for k, v in rows.items()}
    f, s = best["forks"], best["separate"]
    report = {"cpu": cpu_model(), "n": args.n, "max_tokens": args.max_tokens, "threads": args.threads,
              "forks": f, "separate": s, "pages_ratio": f["peak_pages"] / s["peak_pages"],
              "tok_per_s_ratio": f["tok_per_s"] / s["tok_per_s"]}
    print(f"n={args.n}, max_tokens {args.max_tokens}, {args.threads} threads, {cpu_model()}")
    for name, r in (("forks (one request, n choices)", f), ("separate (n requests at once)", s)):
        print(f"  {name:34s} peak pages {r['peak_pages']:5d}  {r['tok_per_s']:7.1f} tok/s  "
              f"{r['wall_s']:6.2f} s  prompt tokens {r['prompt_tokens_run']}")
    print(f"  forks / separate: pages {report['pages_ratio']:.2f}x, tok/s {report['tok_per_s_ratio']:.2f}x")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
