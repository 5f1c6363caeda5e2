#!/usr/bin/env python3
"""The per-turn cost of a Responses chain against a chat-completions conversation of the same turns
(issue 52's benchmark), in one run on one `chorus serve`: the same user turns, greedy, streamed —
through /v1/chat/completions with a program_id (the client sends the whole history each turn), and
through /v1/responses with previous_response_id (the client sends only the new turn). Per turn:
the prompt tokens, those found in the program's blocks (cached), and the time to the first text
delta; then the medians over the turns after the first, and their ratio (responses / chat).

    python3 tools/bench/bench_responses_chain.py [--turns 8] [--rounds 3] [--chorus build/chorus]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from serve_support import start_server, stop_server  # noqa: E402

QUESTIONS = ["Name a planet.", "How far is it from the sun?", "Name another.", "Which is bigger?",
             "Name a moon of it.", "Who found it?", "When?", "Say it in one line.", "Thanks. Name a star.",
             "How hot is it?", "Name another.", "Which is closer?"]


def stream(base, path, body):
    """POSTs `body` streamed; returns (seconds to the first text delta, the text, the last event's usage or
    response)."""
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    first, text, last = None, "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        e = json.loads(line[6:])
        piece = ""
        if "choices" in e and e["choices"]:
            piece = e["choices"][0]["delta"].get("content") or ""
        elif e.get("type") == "response.output_text.delta":
            piece = e["delta"]
        if piece and first is None:
            first = time.perf_counter() - t0
        text += piece
        if e.get("usage") or e.get("type") in ("response.completed", "response.incomplete"):
            last = e
    conn.close()
    return first if first is not None else time.perf_counter() - t0, text, last


def chat_turns(base, turns, tag):
    history, out = [], []
    for q in QUESTIONS[:turns]:
        history.append({"role": "user", "content": q})
        ttft, text, last = stream(base, "/v1/chat/completions",
                                  {"model": "default", "messages": history, "max_tokens": 24, "temperature": 0,
                                   "stream": True, "stream_options": {"include_usage": True}, "program_id": tag})
        u = last["usage"]
        out.append((u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], ttft))
        history.append({"role": "assistant", "content": text})
    return out


def responses_turns(base, turns):
    previous, out = None, []
    for q in QUESTIONS[:turns]:
        body = {"model": "default", "input": q, "max_output_tokens": 24, "temperature": 0, "stream": True}
        if previous:
            body["previous_response_id"] = previous
        ttft, _, last = stream(base, "/v1/responses", body)
        r = last["response"]
        previous = r["id"]
        out.append((r["usage"]["input_tokens"], r["usage"]["input_tokens_details"]["cached_tokens"], ttft))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chorus", default=os.path.join(ROOT, "build", "chorus"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/chorus/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    server, base = start_server(a.chorus, a.model, "--pages", "1024")
    try:
        chat, resp = [], []
        for k in range(a.rounds):  # alternated, so that neither side runs on a warmer machine
            chat.append(chat_turns(base, a.turns, "bench-chat-%d" % k))
            resp.append(responses_turns(base, a.turns))
    finally:
        stop_server(server)
    print("turn | chat: prompt, cached, TTFT ms | responses: input, cached, TTFT ms   (round 1)")
    for i, (c, r) in enumerate(zip(chat[0], resp[0])):
        print("%4d | %5d %5d %7.1f | %5d %5d %7.1f" % (i + 1, c[0], c[1], 1e3 * c[2], r[0], r[1], 1e3 * r[2]))
    later = lambda runs, j: [t[j] for run in runs for t in run[1:]]  # noqa: E731  turns after the first
    for name, j, scale in (("cached tokens", 1, 1), ("uncached prompt tokens", None, 1), ("TTFT ms", 2, 1e3)):
        if j is None:
            c = statistics.median(t[0] - t[1] for run in chat for t in run[1:])
            r = statistics.median(t[0] - t[1] for run in resp for t in run[1:])
        else:
            c, r = statistics.median(later(chat, j)) * scale, statistics.median(later(resp, j)) * scale
        print("median over turns 2-%d, %d rounds, %s: chat %.1f, responses %.1f, ratio %.3f" %
              (a.turns, a.rounds, name, c, r, r / c if c else float("nan")))


if __name__ == "__main__":
    main()
