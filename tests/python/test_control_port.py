"""`chorus run --control-port`: the running programs listed and patched over HTTP (stdlib client).

  python3 test_control_port.py CHORUS GOLDENS_DIR

Two programs on one engine: `watcher` runs until its stdin closes, `quick` ends at once. A patch
adds a writer to the watcher while it runs; refused patches name what is wrong and change nothing;
unknown programs, ended programs, the patch limit and oversized bodies each get their status.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CHORUS, GOLDENS = sys.argv[1], sys.argv[2]
MODEL = os.path.join(GOLDENS, "tiny_llama_f32.gguf")
PATCHES_PER_MINUTE = 20  # actors/program.h kPatchesPerMinute
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


WATCHER = """name: watcher
blocks:
  log:
  notes: {text: "Notes:"}
actors:
  lines: {kind: source, writes: log, from: stdin, every_lines: 1, emit: line}
  out: {kind: sink, to: stdout}
"""
QUICK = """name: quick
blocks:
  a: {text: "hello"}
actors:
  t: {kind: thinker, view: [a], writes: a, max_tokens: 1}
"""
WRITER = "actors: {w: {kind: writer, on: [line], view: [log, notes], writes: notes, to: [out], max_tokens: 4}}"


def call(port, method, path, body=None):
    data = body.encode() if isinstance(body, str) else body
    q = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method,
                               headers={"Content-Type": "application/yaml"} if data is not None else {})
    try:
        with urllib.request.urlopen(q, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


with tempfile.TemporaryDirectory() as d:
    files = []
    for name, text in (("watcher.yaml", WATCHER), ("quick.yaml", QUICK)):
        files.append(os.path.join(d, name))
        with open(files[-1], "w") as f:
            f.write(text)
    p = subprocess.Popen([CHORUS, "run", "--model", MODEL, "--policy", "none", "--control-port", "0"] + files,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace")  # the tiny model writes any bytes
    port = None
    for line in p.stderr:
        if "control on http://127.0.0.1:" in line:
            port = int(line.split("127.0.0.1:")[1].split("/")[0])
            break
    check(port is not None, "the control port is printed")

    status, health = call(port, "GET", "/health")
    check(status == 200 and health == {"status": "ok"}, "GET /health: %d %s" % (status, health))
    state = {}
    for _ in range(100):  # both start at once (no program policy); quick ends within its first step
        status, programs = call(port, "GET", "/programs")
        state = {x["name"]: x["state"] for x in programs}
        if state == {"watcher": "running", "quick": "ended"}:
            break
        time.sleep(0.1)
    check(state == {"watcher": "running", "quick": "ended"}, "GET /programs: %s" % state)
    watcher = [x for x in programs if x["name"] == "watcher"][0]
    check(watcher["blocks"] == ["log", "notes"], "its blocks: %s" % watcher["blocks"])
    check([(a["name"], a["kind"]) for a in watcher["actors"]] == [("lines", "source"), ("out", "sink")],
          "its actors: %s" % watcher["actors"])

    # Refused: each says where, and nothing changes.
    status, r = call(port, "POST", "/programs/watcher/patch", "actors: {w: {kind: writer, view: [log, nowhere]}}")
    check(status == 400 and r["error"]["message"].startswith("patch:1:40: actors.w.view[1]: unknown block \"nowhere\""),
          "a patch naming an unknown block: 400 %s" % r)
    status, r = call(port, "POST", "/programs/watcher/patch", "actors: {w: [")
    check(status == 400 and r["error"]["message"].startswith("patch:1:"), "malformed YAML: 400 %s" % r)
    status, r = call(port, "POST", "/programs/watcher/patch", "actors: {lines: {writes: notes}}")
    check(status == 400 and "actors.lines" in r["error"]["message"], "a source is wired at start: 400 %s" % r)
    status, r = call(port, "GET", "/programs/watcher")
    check(status == 200 and len(r["actors"]) == 2, "the refused patches changed nothing: %s" % r["actors"])
    status, r = call(port, "POST", "/programs/nope/patch", "{}")
    check(status == 404 and "nope" in r["error"]["message"], "an unknown program: 404 %s" % r)
    status, r = call(port, "POST", "/programs/quick/patch", "{}")
    check(status == 409 and "ended" in r["error"]["message"], "an ended program: 409 %s" % r)
    status, r = call(port, "GET", "/nowhere")
    check(status == 404 and "POST /programs/NAME/patch" in r["error"]["message"], "an unknown route: 404 %s" % r)
    status, r = call(port, "POST", "/programs/watcher/patch", "x" * (2 << 20))
    check(status == 413, "a body of 2 MiB: 413 %s" % r)
    status, r = call(port, "POST", "/programs/watcher/patch", "#" * (65 << 10))
    check(status == 400 and r["error"]["message"] == "patch: 66560 bytes: a patch may have at most 65536",
          "a patch past 64 KiB: 400 %s" % r)
    form = urllib.request.Request("http://127.0.0.1:%d/programs/watcher/patch" % port, data=b"#" * 9000)
    try:
        urllib.request.urlopen(form, timeout=30)
        status, r = 200, {}
    except urllib.error.HTTPError as e:
        status, r = e.code, json.loads(e.read())
    check(status == 413 and "application/yaml" in r["error"]["message"],
          "a form-encoded body past 8 KiB (urllib's default type): 413 %s" % r)

    # Applied: the writer is there and runs on the next line.
    status, r = call(port, "POST", "/programs/watcher/patch", WRITER)
    check(status == 200 and r == {"applied": "added w"}, "adding a writer: 200 %s" % r)
    status, r = call(port, "GET", "/programs/watcher")
    w = [a for a in r["actors"] if a["name"] == "w"]
    check(w == [{"name": "w", "kind": "writer", "view": ["log", "notes"], "writes": "notes", "on": ["line"]}],
          "GET /programs/watcher lists it: %s" % w)
    p.stdin.write("the first line\n")
    p.stdin.flush()

    # The limit: every patch that reached the program counts, refused ones too (the 413 bodies
    # did not reach it); past it, 429.
    taken = 5  # the refused patches above that reached the program (4), and the writer
    limited = None
    for i in range(PATCHES_PER_MINUTE + 2):
        status, r = call(port, "POST", "/programs/watcher/patch", "{}")
        if status == 429:
            limited = i
            break
    check(limited == PATCHES_PER_MINUTE - taken, "429 after %d patches in a minute (at %s: %s)" %
          (PATCHES_PER_MINUTE, limited, r))

    out, err = p.communicate(input="", timeout=60)
    report = [l for l in err.splitlines() if l.startswith("[watcher:")]
    check(p.returncode == 0, "exit 0 (%d): %s" % (p.returncode, err[-400:]))
    check(len(out) > 0, "the added writer wrote to the sink: %r" % out)
    check(len(report) == 1 and "w.done x1" in report[0], "the writer ran and ended with it: %s" % report)
    check(len(report) == 1 and "program.patched x%d" % (1 + limited) in report[0] and
          "program.patch_refused x%d" % (taken - 1 + 1) in report[0], "the patches in the report: %s" % report)

if failures:
    print("%d failed" % len(failures))
    sys.exit(1)
print("all passed")
