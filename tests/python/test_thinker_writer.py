#!/usr/bin/env python3
"""The shipped thinker-writer (topologies/thinker_writer.yaml, what scripts/demo.sh runs) does
what its comment says on the default model: the writer writes one line per paragraph of the
thinker, each line non-empty, all of them distinct, each sharing content words with the
paragraph it follows and none copied from the thoughts; and, being `fresh`, its block is cleared
before each line but the first (read from the run's trace). Run at two thread counts, so the
writer sees the thinker's block at different points.

    test_thinker_writer.py CHORUS_BINARY TOPOLOGIES_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

chorus, topologies = sys.argv[1], sys.argv[2]
failures = []
STOP = set("""about above after again also among an and any are because been before being both but
by can could does each from have here into its itself just like made make many more most much not
only other over same some such than that their them then there these they this those through very
what when where which while will with would your yours you our the for was were has had is it of
to in on a as at be or""".split())


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def content_words(text):
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in STOP}


tmp = tempfile.mkdtemp(prefix="chorus-tw-")
for threads in ("2", "1"):
    trace = os.path.join(tmp, "tw-%s.json" % threads)
    env = dict(os.environ, CHORUS_THREADS=threads)
    r = subprocess.run([chorus, "run", os.path.join(topologies, "thinker_writer.yaml"), "--trace", trace],
                       capture_output=True, text=True, timeout=180, env=env)
    check(r.returncode == 0 and "ended by all roles done" in r.stderr,
          "%s threads: the run ends by itself: %s" % (threads, r.stderr.strip().splitlines()[-1:]))
    lines = [l[len("    [writer] "):] for l in r.stdout.splitlines() if l.startswith("    [writer] ")]
    events = json.load(open(trace))["traceEvents"]
    paragraphs = [e["args"]["text"] for e in events if e.get("cat") == "role" and e["name"] == "paragraph"]
    paragraphs = [p for p in paragraphs if p.strip()]
    thoughts = "".join(paragraphs)
    for i, line in enumerate(lines):
        print("     paragraph %d: %s\n     writer:      %s" % (i, paragraphs[i].strip()[:100] if i < len(paragraphs)
                                                               else None, line))
    check(len(paragraphs) >= 3 and len(lines) == len(paragraphs),
          "%s threads: one writer line per paragraph (%d lines, %d paragraphs)" % (threads, len(lines),
                                                                                    len(paragraphs)))
    check(all(l.strip() for l in lines), "%s threads: every line has text" % threads)
    check(len(set(lines)) == len(lines), "%s threads: the lines are all different" % threads)
    shared = [sorted(content_words(l) & content_words(p)) for l, p in zip(lines, paragraphs)]
    check(all(shared), "%s threads: each line shares content words with its paragraph: %s" % (threads, shared))
    check(not any(l.strip() in thoughts for l in lines), "%s threads: no line is copied from the thoughts" % threads)
    # fresh: the notes block starts again before each line but the first.
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 2}
    notes = [e["args"] for e in events if e.get("cat") == "block" and lanes.get(e["tid"], "").startswith("notes")]
    restarts = sum(1 for a, b in zip(notes, notes[1:]) if b["length"] < a["length"])
    check(restarts == len(lines) - 1, "%s threads: the writer's block was cleared before each line but the first "
          "(%d times)" % (threads, restarts))

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
