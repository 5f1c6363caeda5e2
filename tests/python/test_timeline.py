#!/usr/bin/env python3
"""The timeline page (`chorus trace FILE --html OUT`, engine/step/timeline.h) of a real run, in
headless Chromium: `chorus run` of the thinker-writer topology on the default model with --trace,
the page made from its trace, then Chromium's DOM after the page's script ran — one lane per block
the run wrote, each with the tokens and the exact text its appends carried in the trace file, the
roles' events and the engine's steps counted as in the file — and a screenshot that is not blank.
Then the tool agent's page: its tool run drawn on its program's lane. A file that is not a trace
is refused.

    test_timeline.py CHORUS_BINARY TOPOLOGIES_DIR [CHROMIUM]
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from PIL import Image

chorus, topologies = sys.argv[1], sys.argv[2]
chromium = sys.argv[3] if len(sys.argv) > 3 else (shutil.which("chromium") or shutil.which("chromium-browser"))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


if not chromium:
    if os.environ.get("CHORUS_REQUIRE_MODEL") == "1":
        print("FAIL no chromium (scripts/setup.sh installs Debian's chromium)")
        sys.exit(1)
    print("skipped: no chromium")
    sys.exit(0)

tmp = tempfile.mkdtemp(prefix="chorus-timeline-")
trace = os.path.join(tmp, "run.json")
page = os.path.join(tmp, "run.html")
r = subprocess.run([chorus, "run", os.path.join(topologies, "thinker_writer.yaml"), "--trace", trace],
                   capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "chorus run --trace exits 0")
r = subprocess.run([chorus, "trace", trace, "--html", page], capture_output=True, text=True, timeout=60)
check(r.returncode == 0 and os.path.exists(page), "chorus trace --html writes the page: " + r.stdout.strip()[-80:])

# What the trace file holds, read here on its own.
events = json.load(open(trace))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 2}
want = {}
for e in events:
    if e.get("cat") == "block" and e["name"] == "append":
        tokens, text, _ = want.get(e["tid"], (0, "", 0))
        want[e["tid"]] = (tokens + e["args"]["tokens"], text + e["args"]["text"], e["args"]["length"])
want_roles = sum(1 for e in events if e.get("cat") == "role")
want_steps = sum(1 for e in events if e["ph"] == "X" and e["name"] == "step")
check(len(want) == 3 and want_steps > 10, "the trace has 3 block lanes and %d steps" % want_steps)


def run_chromium(*args):
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--hide-scrollbars", "--user-data-dir=" + profile, *args, "file://" + page],
                          capture_output=True, text=True, timeout=120)


class Lanes(html.parser.HTMLParser):
    """The lanes of the DOM Chromium dumps: each section.lane's data-* and its .text's text."""
    VOID = {"meta", "input", "br", "img", "link", "hr", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.lanes, self.ready = [], [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
        if tag == "section" and "lane" in a.get("class", "").split():
            self.lanes.append({"class": a["class"].split(), "data": {k[5:]: v for k, v in a.items()
                                                                      if k.startswith("data-")}, "text": ""})
        if tag not in self.VOID:
            self.stack.append((tag, a.get("class", "").split()))

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self.lanes and any(t == "div" and "text" in c for t, c in self.stack):
            self.lanes[-1]["text"] += data


dom = run_chromium("--dump-dom", "--virtual-time-budget=3000")
check(dom.returncode == 0 and "<main" in dom.stdout, "headless Chromium loads the page")
parsed = Lanes()
parsed.feed(dom.stdout)
check(parsed.ready, "the page's script ran to its end")
check("<h1>chorus timeline: run.json</h1>" in dom.stdout, "the page is titled by the trace's file name")
blocks = [l for l in parsed.lanes if "block" in l["class"]]
got = {int(l["data"]["block"]): (int(l["data"]["tokens"]), l["text"], int(l["data"]["length"])) for l in blocks}
check(sorted(got) == sorted(want), "one lane per block of the trace: %s" % sorted(names.get(b, b) for b in got))
for b in sorted(want):
    g = got.get(b, (None, None))
    shown = [int(l["data"]["shown"]) for l in blocks if int(l["data"]["block"]) == b]
    check(g[0] == want[b][0] and shown == [want[b][0]],
          "lane %s counts the trace's %d tokens, all shown at the end" % (names.get(b), want[b][0]))
    check(g[1] == want[b][1], "lane %s shows the block's text exactly as appended (%d chars)" %
          (names.get(b), len(want[b][1])))
    check(g[2] == want[b][2], "lane %s says it holds %d tokens at the end, as its last append" % (names.get(b), want[b][2]))
notes = [l for l in blocks if names[int(l["data"]["block"])].startswith("notes")]
check(len(notes) == 1 and 'class="cleared"' in dom.stdout and
      int(notes[0]["data"]["length"]) < int(notes[0]["data"]["tokens"]),
      "the fresh writer's lane strikes through what its clears took away")
order = [names[int(l["data"]["block"])].split(" (")[0] for l in blocks]
check(order[0] == "prompt", "lanes in the order the blocks began: %s" % order)
roles = [l for l in parsed.lanes if "roles" in l["class"]]
check(len(roles) == 1 and int(roles[0]["data"]["events"]) == want_roles,
      "the program's lane has the trace's %d role events" % want_roles)
steps = [l for l in parsed.lanes if "steps" in l["class"]]
check(len(steps) == 1 and int(steps[0]["data"]["steps"]) == want_steps,
      "the steps lane has the trace's %d steps" % want_steps)

shot = os.path.join(tmp, "shot.png")
s = run_chromium("--screenshot=" + shot, "--window-size=1280,900")
check(s.returncode == 0 and os.path.exists(shot), "Chromium takes a screenshot")
if os.path.exists(shot):
    img = Image.open(shot).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20) or []
    background = max(colors)[0] if colors else 0
    check(img.size == (1280, 900) and len(colors) > 50 and background < 0.9 * img.size[0] * img.size[1],
          "the screenshot is not blank: %d colours, the commonest on %.0f %% of it" %
          (len(colors), 100.0 * background / (img.size[0] * img.size[1])))

# A program that acts: its tool's run is a bar on its lane, as long as the trace's slice.
tool_trace = os.path.join(tmp, "tool.json")
r = subprocess.run([chorus, "run", os.path.join(topologies, "tool_agent.yaml"), "--trace", tool_trace],
                   capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "chorus run tool_agent.yaml --trace exits 0: " + r.stderr.strip()[-120:])
runs = [e for e in json.load(open(tool_trace))["traceEvents"] if e.get("cat") == "tool" and e["ph"] == "X"]
check(len(runs) == 1 and runs[0]["name"] == "add", "the trace has the tool's run: %s" % runs)
page = os.path.join(tmp, "tool.html")
r = subprocess.run([chorus, "trace", tool_trace, "--html", page], capture_output=True, text=True, timeout=60)
dom = run_chromium("--dump-dom", "--virtual-time-budget=3000")
parsed = Lanes()
parsed.feed(dom.stdout)
roles = [l for l in parsed.lanes if "roles" in l["class"]]
check(parsed.ready and len(roles) == 1 and int(roles[0]["data"]["tools"]) == len(runs),
      "the program's lane has the trace's %d tool run(s)" % len(runs))
m = re.search(r'class="tool"[^>]*><title>([^<]*)</title>', dom.stdout)
check(m is not None and "tool add" in m.group(1) and "exited with status 0" in m.group(1),
      "its bar is titled with the tool and how it ended: %s" % (m.group(1) if m else None))

bad = os.path.join(tmp, "bad.json")
open(bad, "w").write("{\"traceEvents\": [")
r = subprocess.run([chorus, "trace", bad, "--html", os.path.join(tmp, "bad.html")], capture_output=True, text=True)
check(r.returncode == 2 and "not JSON" in r.stderr and not os.path.exists(os.path.join(tmp, "bad.html")),
      "a file that is not a trace is refused: " + r.stderr.strip())

print("%d failed" % len(failures))
if not failures:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if failures else 0)
