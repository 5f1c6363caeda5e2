#!/usr/bin/env python3
"""`--trace FILE` (engine/step/trace.h): `chorus run` of the thinker-writer topology and `chorus
serve` with one chat completion write Chrome/Perfetto trace-event JSON that parses; engine steps
carry their batch; every request span that begins ends; each block's lane is named and its
last append leaves what the run reports the block holds; the roles' events are there; a path that
cannot be written is refused before anything runs.

    test_trace.py CHORUS_BINARY MODEL TOPOLOGIES_DIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

chorus, model, topologies = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def well_formed(events):
    """Steps with durations and batches, spans that pair up. Returns (steps, spans) counts."""
    steps = [e for e in events if e["ph"] == "X" and e["name"] == "step"]
    ok = all(e["dur"] >= 0 and {"decode", "probe", "prefill", "requests"} <= set(e["args"]) for e in steps)
    ok = ok and all(sum(r["tokens"] for r in e["args"]["requests"]) ==
                    e["args"]["decode"] + e["args"]["probe"] + e["args"]["prefill"] for e in steps)
    begins = sorted(e["id"] for e in events if e["ph"] == "b")
    ends = sorted(e["id"] for e in events if e["ph"] == "e")
    return ok, len(steps), begins, ends


tmp = tempfile.mkdtemp(prefix="chorus-trace-")
path = os.path.join(tmp, "run.json")
r = subprocess.run([chorus, "run", os.path.join(topologies, "thinker_writer.yaml"), "--trace", path],
                   capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "chorus run --trace exits 0")
j = json.load(open(path))
events = j["traceEvents"]
ok, n_steps, begins, ends = well_formed(events)
check(ok and n_steps > 10, "the run's %d steps carry their batch (decode, probe, prefill, per request)" % n_steps)
check(begins and begins == ends, "each of the %d request spans that begins ends" % len(begins))
lanes = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 2}
check(sorted(n.split(" (")[0] for n in lanes.values()) == ["notes", "prompt", "thoughts"],
      "one lane per block, named: %s" % sorted(lanes.values()))
report = re.search(r"blocks: ([^;]*);", r.stderr)
held = dict((b.rsplit(" ", 1)[0], int(b.rsplit(" ", 1)[1])) for b in report.group(1).split(", ")) if report else {}
appended, last = {}, {}
for e in events:
    if e["name"] == "append":
        name = lanes[e["tid"]].split(" (")[0]
        appended[name] = appended.get(name, 0) + e["args"]["tokens"]
        last[name] = e["args"]["length"]
# The writer is `fresh` (its block is cleared before each line): what it holds is its last line's.
check(held and last == held, "each block's last append leaves what the run reports it holds: %s vs %s" %
      (last, held))
check(all(appended[b] == held[b] for b in ("prompt", "thoughts")) and appended["notes"] > held["notes"],
      "the blocks that only grow hold what was appended to them; the fresh writer's appended more: %s" % appended)
roles = {e["name"] for e in events if e.get("cat") == "role"}
check({"thinker.done", "writer.done"} <= roles, "the roles' events are in the trace: %s" % sorted(roles))
check("trace of %d events written to %s" % (len([e for e in events if e["ph"] != "M"]), path) in r.stderr,
      "the run says how many events it wrote, and where")

bad = subprocess.run([chorus, "run", os.path.join(topologies, "thinker_writer.yaml"), "--trace",
                      os.path.join(tmp, "no", "such", "dir", "t.json")], capture_output=True, text=True, timeout=60)
check(bad.returncode == 2 and "cannot write the trace" in bad.stderr, "an unwritable --trace path is refused at once")

# serve: one chat completion, then SIGTERM; the trace is written at exit.
spath = os.path.join(tmp, "serve.json")
server = subprocess.Popen([chorus, "serve", "--model", model, "--port", "0", "--pages", "64", "-t", "1",
                           "--trace", spath], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
line = server.stdout.readline()
m = re.search(r"http://([0-9.]+):(\d+)/v1", line)
check(m is not None, "chorus serve --trace starts")
if m:
    body = json.dumps({"model": "SmolLM2-135M-Instruct.Q4_1", "max_tokens": 8, "temperature": 0,
                       "messages": [{"role": "user", "content": "Name a colour."}]}).encode()
    req = urllib.request.Request("http://%s:%s/v1/chat/completions" % m.groups(), data=body,
                                 headers={"Content-Type": "application/json"})
    reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
    server.send_signal(signal.SIGTERM)
    err = server.communicate(timeout=60)[1]
    check(server.returncode == 0 and os.path.exists(spath), "serve writes its trace when it stops")
    sj = json.load(open(spath))
    ok, n_steps, begins, ends = well_formed(sj["traceEvents"])
    gen = [e for e in sj["traceEvents"] if e["ph"] == "e" and e["name"] == "generate"]
    check(ok and n_steps > 0 and begins == ends and len(gen) == 1 and
          gen[0]["args"]["generated"] == reply["usage"]["completion_tokens"],
          "serve's trace: %d steps, one generate span of the reply's %d tokens" %
          (n_steps, reply["usage"]["completion_tokens"]))
    # The request itself, on the gateway's process: from its arrival to its last token, with its
    # usage, around the engine's span of its generation.
    http = [e for e in sj["traceEvents"] if e.get("cat") == "http"]
    hb = [e for e in http if e["ph"] == "b"]
    he = [e for e in http if e["ph"] == "e"]
    check(len(hb) == 1 and len(he) == 1 and hb[0]["pid"] == 4 and hb[0]["id"] == he[0]["id"] and
          hb[0]["name"] == "POST /v1/chat/completions" and hb[0]["args"]["reply"] == reply["id"],
          "one request span on the gateway's process, named for the reply: %s" % http)
    if len(hb) == 1 and len(he) == 1 and gen:
        a = he[0]["args"]
        check(a["status"] == 200 and a["completion_tokens"] == reply["usage"]["completion_tokens"] and
              a["prompt_tokens"] == reply["usage"]["prompt_tokens"] and a["first_token_s"] is not None,
              "its end carries the reply's usage and timings: %s" % a)
        gb = [e for e in sj["traceEvents"] if e["ph"] == "b" and e["name"] == "generate"]
        check(hb[0]["ts"] <= gb[0]["ts"] and he[0]["ts"] >= gen[0]["ts"],
              "it spans the engine's generation (%d..%d around %d..%d)" %
              (hb[0]["ts"], he[0]["ts"], gb[0]["ts"], gen[0]["ts"]))
    names = {e["args"]["name"] for e in sj["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    check({"engine", "blocks", "roles", "gateway", "cluster"} <= names, "the processes are named: %s" % names)
else:
    server.kill()

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
