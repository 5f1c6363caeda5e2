#!/usr/bin/env python3
"""`chorus serve` logs one line per completion request at its default level (info): the reply's
id, its program, status, prompt tokens (and how many were reused), completion tokens and how it
finished, whether it streamed, and its timings — with the same counts the client was told in
`usage`; a refused request gets its line with its status and why. `--log-level warn` silences
them; a level that does not exist is refused.

    test_serve_log.py CHORUS_BINARY MODEL
"""
import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

chorus, model = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def post(base, body, stream=False):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    if not stream:
        return 200, json.loads(text)
    chunks = [json.loads(l[6:]) for l in text.splitlines() if l.startswith("data: {")]
    return 200, chunks


def serve(*extra):
    p = subprocess.Popen([chorus, *extra, "serve", "--model", model, "--port", "0", "--pages", "64", "-t", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.search(r"(http://[0-9.]+:\d+)/v1", p.stdout.readline())
    return p, m.group(1) if m else None


server, base = serve()
check(base is not None, "chorus serve starts")
port = base.rsplit(":", 1)[1]
second = subprocess.run([chorus, "serve", "--model", model, "--port", port, "--pages", "16"], capture_output=True,
                        text=True, timeout=120)
check(second.returncode != 0 and "cannot bind" in second.stderr,
      "a second server on its port is refused, not let in beside it: " + second.stderr.strip()[-80:])
turn = {"model": "SmolLM2-135M-Instruct.Q4_1", "max_tokens": 8, "temperature": 0, "program_id": "p1",
        "messages": [{"role": "user", "content": "Name a colour."}]}
status1, whole = post(base, turn)
reply = whole["choices"][0]["message"]["content"]
turn2 = dict(turn, stream=True, stream_options={"include_usage": True},
             messages=turn["messages"] + [{"role": "assistant", "content": reply},
                                          {"role": "user", "content": "Another one."}])
status2, chunks = post(base, turn2, stream=True)
usage2 = chunks[-1]["usage"]
status3, bad = post(base, dict(turn, max_tokens=-3))
server.send_signal(signal.SIGTERM)
err = server.communicate(timeout=60)[1]
lines = [l for l in err.splitlines() if "gateway: POST /v1/chat/completions" in l]
for l in lines:
    print("     " + l)
check(status1 == 200 and status2 == 200 and status3 == 400, "two replies and one refusal (%d, %d, %d)" %
      (status1, status2, status3))
check(len(lines) == 3, "one log line per request: %d" % len(lines))
if len(lines) == 3:
    u1 = whole["usage"]
    check("[info]" in lines[0] and " program p1: 200, %d prompt tokens (" % u1["prompt_tokens"] in lines[0] and
          ", %d completion (" % u1["completion_tokens"] in lines[0] and "streamed" not in lines[0],
          "the first line has the program, status and the usage's counts")
    check(re.search(r"admitted after [0-9.]+ s, first token [0-9.]+ s, done [0-9.]+ s$", lines[0]) is not None,
          "it has the request's timings")
    reused = usage2.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    check(" program p1: 200, %d prompt tokens (%d reused), %d completion (" %
          (usage2["prompt_tokens"], reused, usage2["completion_tokens"]) in lines[1] and ", streamed;" in lines[1]
          and reused > 0, "the streamed second turn's line says what was reused (%d tokens)" % reused)
    check(": 400 " in lines[2] and "max_tokens" in lines[2], "the refusal's line has its status and why")

quiet, qbase = serve("--log-level", "warn")
if qbase:
    post(qbase, turn)
quiet.send_signal(signal.SIGTERM)
qerr = quiet.communicate(timeout=60)[1]
check(qbase and "gateway: POST" not in qerr, "--log-level warn silences them")
r = subprocess.run([chorus, "--log-level", "loud", "info"], capture_output=True, text=True)
check(r.returncode != 0 and "loud" in r.stderr, "an unknown level is refused: " + r.stderr.strip()[:80])

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
