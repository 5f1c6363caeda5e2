#!/usr/bin/env python3
"""Program-aware scheduling vs request-level baselines, side by side on one machine (issue 8).

N agent programs (default 32) each loop K steps: reason (a chat completion of ~64 tokens, with
its program_id, so the conversation stays in the program's KV block), then act (a real tool,
sandboxed with bubblewrap, that sleeps a heavy-tailed random time and prints ~200 tokens, which
go into the context as the next message). The KV pool is set well below the working set, so the
server must evict. The same workload (same seeds) runs against `chorus serve` three times:

  lru      request-level LRU eviction of idle programs (what a request-level engine does)
  ttl      TTL pinning: an idle program is kept for --ttl seconds after its request (Continuum-like)
  program  chorus's program-aware policy (ThunderAgent: pause acting programs, shortest first,
           time decay, one restore queue)

Reported per policy: steps per minute, recomputed tokens, KV hit rate (the share of context
tokens found resident when a request came), p50/p99 step latency (one reason request, waits
included), the ratio of steps/min to lru, tokens generated per minute, the replies cut short
(finish "length" before max_tokens: none since the server counts each request's room), where
request time went (the mean number of requests in flight and the share of their time spent
waiting for a restore, from /metrics), and the rate over the middle half of the run (between the
N/4-th and 3N/4-th completed step), since the whole-run rate of this closed workload also counts
its start and its tail.

  PY=~/.cache/chorus/venv-tests/bin/python
  $PY tools/bench/bench_programs.py --programs 32 --steps 4 --pages 600 --json /tmp/programs.json
"""
import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import openai

from common import stop

WORDS = ("alpha beta gamma delta error warning file line value result check build test pass fail "
         "module config server client request response cache block token model step tool").split()


def tool_run(rng, mean_output_words):
    """A sandboxed tool: sleeps a heavy-tailed time (Pareto, capped), prints ~200 tokens."""
    sleep = min(8.0, 0.3 * rng.paretovariate(1.5))
    words = " ".join(rng.choice(WORDS) for _ in range(mean_output_words))
    script = "sleep %.3f; echo '%s'" % (sleep, words)
    cmd = ["sh", "-c", script]
    if shutil.which("bwrap"):
        cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               "--unshare-all", "--die-with-parent", "--"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    return out.strip(), sleep


def run_policy(args, policy):
    server = subprocess.Popen([args.chorus, "serve", "--model", args.model, "--port", "0", "--pages", str(args.pages),
                               "--policy", policy, "--ttl", str(args.ttl), "--check-period", str(args.check_period),
                               "--host-pages", str(args.host_pages), "--ctx", "8192",
                               "--aging", str(args.aging), "--restore-wait", str(args.restore_wait),
                               "--low-watermark", str(args.low_watermark)]
                              + (["--displace"] if args.displace and policy == "program" else []),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()
        m = re.search(r"http://([0-9.]+):(\d+)/v1", line)
        if not m:
            sys.exit("chorus serve did not start: " + line + server.stdout.read())
        base = "http://%s:%s" % (m.group(1), m.group(2))
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=600, max_retries=0)
        model = client.models.list().data[0].id
        latencies, lock, errors = [], threading.Lock(), []
        steps = [0]
        generated = [0]   # completion tokens
        cut = [0]         # replies that ended "length" short of max_tokens (a full KV pool, before)
        step_times = []   # when each step completed
        done_times = []   # when each program completed its last step

        def program(i):
            rng = random.Random(1000 + i)
            messages = [{"role": "system", "content": "You are an agent. Think about the tool output, then decide."},
                        {"role": "user", "content": "Task %d: check the build and report what fails." % i}]
            for k in range(args.steps):
                t0 = time.time()
                try:
                    r = client.chat.completions.create(model=model, messages=messages, max_tokens=args.reason_tokens,
                                                       temperature=0.8, seed=i * 100 + k,
                                                       extra_body={"program_id": "bench-%d" % i})
                except Exception as e:  # noqa: BLE001 - reported, the benchmark goes on
                    with lock:
                        errors.append(str(e))
                    return
                with lock:
                    latencies.append(time.time() - t0)
                    steps[0] += 1
                    generated[0] += r.usage.completion_tokens
                    if r.choices[0].finish_reason == "length" and r.usage.completion_tokens < args.reason_tokens:
                        cut[0] += 1
                    step_times.append(time.time())
                    if k + 1 == args.steps:
                        done_times.append(time.time())
                messages.append({"role": "assistant", "content": r.choices[0].message.content})
                if k + 1 < args.steps:
                    out, _ = tool_run(rng, args.tool_words)
                    messages.append({"role": "user", "content": "Tool output:\n" + out})

        t0 = time.time()
        threads = [threading.Thread(target=program, args=(i,)) for i in range(args.programs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        # The middle half: steps/min between the completion of the N/4-th and the 3N/4-th step.
        # A closed workload's whole-run rate also counts its start (everything fits) and its tail
        # (few programs left, the scheduler's order decides who is last).
        step_times.sort()
        n = len(step_times)
        middle_rate = (60.0 * (n // 2) / max(step_times[3 * n // 4] - step_times[n // 4], 1e-9)) if n >= 8 else float("nan")
        first_done = min(done_times) if done_times else t0 + wall
        metrics = urllib.request.urlopen(base + "/metrics").read().decode()

        def metric(name):
            mm = re.search(r"^%s (\S+)" % name, metrics, re.M)
            return float(mm.group(1)) if mm else 0.0

        reused, recomputed = metric("chorus_reused_tokens_total"), metric("chorus_recomputed_tokens_total")
        latencies.sort()
        pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
        return {"policy": policy, "steps": steps[0], "wall_s": wall, "steps_per_min": 60.0 * steps[0] / wall,
                "generated_tokens": generated[0], "generated_per_min": 60.0 * generated[0] / wall, "cut_short": cut[0],
                "recomputed_tokens": recomputed, "reused_tokens": reused,
                "kv_hit_rate": 1.0 - recomputed / reused if reused > 0 else 1.0,
                "p50_step_s": pct(0.50), "p99_step_s": pct(0.99), "pauses": metric("chorus_pauses_total"),
                "restores": metric("chorus_restores_total"), "errors": errors[:3], "n_errors": len(errors),
                # Where request time went: mean requests in flight, and the share spent waiting for a restore.
                "middle_steps_per_min": middle_rate, "first_done_s": first_done - t0,
                "in_flight": metric("chorus_request_seconds_total") / wall,
                "restore_wait_share": (metric("chorus_restore_wait_seconds_total") /
                                       max(metric("chorus_request_seconds_total"), 1e-9))}
    finally:
        stop([server])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default="build/chorus")
    ap.add_argument("--model", default=None, help="GGUF (default: the default model)")
    ap.add_argument("--programs", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--reason-tokens", type=int, default=64)
    ap.add_argument("--tool-words", type=int, default=150, help="words of tool output (~200 tokens)")
    ap.add_argument("--pages", type=int, default=600, help="KV pages of 16 tokens: set below the working set")
    ap.add_argument("--host-pages", type=int, default=0,
                    help="host-memory pages for offloaded pauses (chorus serve --host-pages); 0: drop only")
    ap.add_argument("--ttl", type=float, default=2.0)
    ap.add_argument("--aging", type=float, default=10.0, help="chorus serve --aging (program policy)")
    ap.add_argument("--restore-wait", type=float, default=300.0, help="chorus serve --restore-wait")
    ap.add_argument("--displace", action="store_true", help="chorus serve --displace (program policy)")
    ap.add_argument("--low-watermark", type=float, default=0.85, help="chorus serve --low-watermark (program policy)")
    ap.add_argument("--check-period", type=float, default=1.0)
    ap.add_argument("--policies", default="lru,ttl,program")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.model is None:
        import os
        args.model = os.path.expanduser("~/.cache/chorus/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    results = []
    for p in args.policies.split(","):
        r = run_policy(args, p)
        results.append(r)
        print(json.dumps(r), flush=True)
    base = next((r for r in results if r["policy"] == "lru"), results[0])
    print("\n%-8s %10s %10s %12s %8s %9s %9s %8s %6s %10s %10s %10s %11s" % (
        "policy", "steps/min", "vs lru", "recomputed", "hit", "p50 s", "p99 s", "errors", "cut", "tokens/min",
        "in flight", "wait share", "middle/min"))
    for r in results:
        print("%-8s %10.1f %9.2fx %12d %7.1f%% %9.2f %9.2f %8d %6d %10.1f %10.2f %9.1f%% %11.1f" % (
            r["policy"], r["steps_per_min"], r["steps_per_min"] / base["steps_per_min"], r["recomputed_tokens"],
            100 * r["kv_hit_rate"], r["p50_step_s"], r["p99_step_s"], r["n_errors"], r["cut_short"],
            r["generated_per_min"], r["in_flight"], 100 * r["restore_wait_share"], r["middle_steps_per_min"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
