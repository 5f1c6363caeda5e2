#!/usr/bin/env python3
"""A served agent workload against llama.cpp's own server, in one run: N clients, each an agent
of T turns over one conversation. Each turn streams a greedy reply, then the agent appends the
reply and a tool result (a user turn `<tool_response>...</tool_response>`, as a tool agent's
loop would) and asks again. `chorus serve` and `llama-server -np N` take turns on the same GGUF
and thread count, round after round; for each the script reports completion tokens per second of
wall time (all clients together) and the time to the first streamed token, p50 and p95.

  python3 tools/bench/bench_served.py [--model M.gguf] [--clients 4] [--turns 4] [--max-tokens 64]
                                      [--threads 2] [--rounds 2] [--bin LLAMA_BIN_DIR]

chorus keeps each agent's KV between turns by its `program_id` (a field of the request, as
serve.md documents); llama-server by its slots' prompt cache (`cache_prompt`, its default: each
turn's prompt extends the last). The peer is built by build_llamacpp.sh when --bin is not given.
Standard library only.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from common import DEFAULT_CHORUS, DEFAULT_MODEL, HERE, cpu_model, free_port, stop

QUESTIONS = [
    "Plan a three-day trip to Lisbon.",
    "How do I find a memory leak in a C++ service?",
    "Summarise why the sky is blue.",
    "Write a short status report for a robot arm that finished its task.",
    "Which sorting algorithm should a log indexer use?",
    "Explain what a KV cache is.",
    "Suggest a name for a weather station.",
    "What should a monitoring agent check first when a disk fills up?",
]


def wait_ready(port, proc, limit=120):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError("the server exited with status %d" % proc.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not answer /health within %d s" % limit)


def stream_turn(port, body):
    """One streamed chat completion: (completion tokens, seconds to the first content, reply text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    text, first, usage, pieces = "", None, None, 0
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if first is None:
                    first = time.time() - t0
                text += piece
                pieces += 1
    tokens = usage["completion_tokens"] if usage else pieces
    return tokens, first if first is not None else time.time() - t0, text


def agent(port, k, args, program, out):
    messages = [{"role": "user", "content": QUESTIONS[k % len(QUESTIONS)]}]
    for turn in range(args.turns):
        body = {"model": "default", "messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        if program:
            body["program_id"] = "agent-%d" % k
        tokens, ttft, text = stream_turn(port, body)
        out.append((tokens, ttft))
        messages.append({"role": "assistant", "content": text})
        messages.append({"role": "user", "content": "<tool_response>\n{\"status\": \"ok\", \"turn\": %d}\n"
                                                    "</tool_response>\nGo on." % (turn + 1)})


def workload(port, args, program):
    results, threads, errors = [], [], []

    def run(k):
        try:
            agent(port, k, args, program, results)
        except Exception as e:  # reported, and the round fails
            errors.append(str(e))

    t0 = time.time()
    for k in range(args.clients):
        threads.append(threading.Thread(target=run, args=(k,)))
        threads[-1].start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(errors[0])
    ttfts = sorted(t for _, t in results)
    return {"tok_s": sum(n for n, _ in results) / wall, "ttft_p50": statistics.median(ttfts),
            "ttft_p95": ttfts[min(len(ttfts) - 1, int(round(0.95 * (len(ttfts) - 1))))], "turns": len(results),
            "tokens": sum(n for n, _ in results)}


def serve_chorus(args, port):
    return subprocess.Popen([args.chorus, "serve", "--model", args.model, "--port", str(port), "-t", str(args.threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def serve_llama(args, port):
    ctx = args.clients * args.ctx_per_client
    return subprocess.Popen([os.path.join(args.bin, "llama-server"), "-m", args.model, "--port", str(port),
                             "-t", str(args.threads), "-np", str(args.clients), "-c", str(ctx), "--no-webui"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(start, args, program):
    port = free_port()
    proc = start(args, port)
    try:
        wait_ready(port, proc)
        return workload(port, args, program)
    finally:
        stop([proc])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chorus", default=DEFAULT_CHORUS)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx-per-client", type=int, default=2048, help="llama-server's context per slot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bin", default=None, help="llama.cpp tools (default: build_llamacpp.sh's, built if missing)")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit("bench_served: no such model file: " + args.model)
    if args.bin is None:
        res = subprocess.run(["bash", os.path.join(HERE, "build_llamacpp.sh")], check=True, capture_output=True,
                             text=True)
        args.bin = res.stdout.strip().splitlines()[-1]
    rounds = []
    for r in range(args.rounds):
        c = measure(serve_chorus, args, True)
        l = measure(serve_llama, args, False)
        rounds.append((c, l))
        print("round %d: chorus %.1f tok/s (TTFT p50 %.3f s, p95 %.3f s); llama-server %.1f tok/s "
              "(p50 %.3f s, p95 %.3f s): %.2fx" % (r + 1, c["tok_s"], c["ttft_p50"], c["ttft_p95"], l["tok_s"],
                                                   l["ttft_p50"], l["ttft_p95"], c["tok_s"] / l["tok_s"]),
              flush=True)
    med = lambda side, key: statistics.median(x[side][key] for x in rounds)
    print("\n%s, %d threads; %s; %d clients x %d turns, %d tokens a turn, greedy, streamed; medians of %d "
          "alternating rounds:\n" % (cpu_model(), args.threads, os.path.basename(args.model), args.clients,
                                     args.turns, args.max_tokens, args.rounds))
    print("| server | completion tok/s | TTFT p50 | TTFT p95 | tokens a round |\n|---|---|---|---|---|")
    for side, name in ((0, "chorus serve"), (1, "llama-server -np %d" % args.clients)):
        print("| %s | %.1f | %.3f s | %.3f s | %d |" % (name, med(side, "tok_s"), med(side, "ttft_p50"),
                                                         med(side, "ttft_p95"), med(side, "tokens")))
    print("\nratio (tok/s): **%.2fx**" % (med(0, "tok_s") / med(1, "tok_s")))


if __name__ == "__main__":
    main()
