#!/usr/bin/env python3
"""Topology programs under memory pressure: `chorus run --copies N` on a pool that holds a few of
them, against the same programs on a pool that holds them all (issue 8, docs/scheduling.md
"Topology programs").

The program is topologies/tool_agent.yaml with its tool made slow (it sleeps --tool-s seconds in
its sandbox before it answers): SmolLM2 writes a tool call, the tool runs, the thinker answers.
Each configuration runs the same N copies in one `chorus run`, one after the other in this
script, on the same machine and thread count:

  roomy     a pool for all N at once (--roomy-pages): nothing is ever paused; the ceiling
  roomy-none  the same without the scheduler: what admission and the room gate cost
  program   a pool for about N/4 (--pages), the program-aware scheduler (drop: a restore prefills)
  offload   the same pool, paused pages kept in host memory (--host-pages)
  none      the same pool without the scheduler (--policy none): how it fails

Reported: wall seconds, programs per minute and its ratio to roomy, the programs that ended
whole (every block the same as the program alone on an engine of its own), and the scheduler's
line (admissions, pauses, restores, recomputed tokens).

  python3 tools/bench/bench_run_programs.py --copies 32

With --baseline OTHER_CHORUS (another build of chorus) every configuration runs --rounds times
with each binary, alternating, and the table gives both binaries' median wall seconds and their
ratio: a change measured against the tree before it, in one run.

  python3 tools/bench/bench_run_programs.py --copies 32 --baseline /tmp/chorus-before --rounds 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default=os.path.join(ROOT, "build", "chorus"))
    ap.add_argument("--copies", type=int, default=32)
    ap.add_argument("--pages", type=int, default=64, help="the small pool (a program takes about 14 pages)")
    ap.add_argument("--roomy-pages", type=int, default=0, help="the pool for all (default: 16 per copy)")
    ap.add_argument("--host-pages", type=int, default=4096)
    ap.add_argument("--tool-s", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--baseline", default="", help="another chorus binary, run alternately with --chorus")
    ap.add_argument("--rounds", type=int, default=3, help="with --baseline: runs of each binary per configuration")
    args = ap.parse_args()
    roomy = args.roomy_pages or 16 * args.copies

    with open(os.path.join(ROOT, "topologies", "tool_agent.yaml")) as f:
        agent = f.read()
    agent = agent.replace("import json, sys;", "import json, sys, time;")
    agent = agent.replace("print(int(x['a']) + int(x['b']))", "time.sleep(%g); print(int(x['a']) + int(x['b']))" % args.tool_s)
    agent = agent.replace("budget:\n  seconds: 120\n", "budget:\n  seconds: 3600\n\nengine:\n  pages: 64\n")
    if "time.sleep" not in agent or "seconds: 3600" not in agent:
        sys.exit("tool_agent.yaml changed: cannot make its tool slow")
    tmp = tempfile.mkdtemp(prefix="chorus-bench-run-")
    path = os.path.join(tmp, "slow_agent.yaml")
    with open(path, "w") as f:
        f.write(agent)

    def run(copies, pages, *extra, chorus=None):
        cmd = [chorus or args.chorus, "run", path, "--copies", str(copies), "--set", "engine.pages=%d" % pages,
               "-t", str(args.threads)] + list(extra)
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True)
        return time.monotonic() - t0, p

    def blocks(line):
        m = re.search(r"blocks: ([^;]*);", line)
        return m.group(1) if m else None

    _, alone = run(1, roomy)
    want = blocks(alone.stderr)
    if alone.returncode != 0 or want is None:
        sys.exit("the program alone failed:\n" + alone.stderr[-2000:])
    print("alone: blocks %s" % want)
    configs = (("roomy", roomy, []), ("roomy-none", roomy, ["--policy", "none"]), ("program", args.pages, []),
               ("offload", args.pages, ["--host-pages", str(args.host_pages)]), ("none", args.pages, ["--policy", "none"]))
    if args.baseline:
        return compare(args, configs, run, blocks, want)
    rows = []
    for name, pages, extra in configs:
        secs, p = run(args.copies, pages, *extra)
        reports = [l for l in p.stderr.splitlines() if l.startswith("[tool_agent#")]
        whole = sum(1 for l in reports if "ended by all roles done" in l and blocks(l) == want)
        sched = next((l for l in p.stderr.splitlines() if l.startswith("[scheduler:")), "")
        rows.append((name, pages, secs, whole, p.returncode, sched))
        print("%-8s pages %5d: %6.1f s, %d of %d whole, exit %d %s" % (name, pages, secs, whole, args.copies, p.returncode, sched))
    base = 60.0 * rows[0][3] / rows[0][2]
    print()
    print("| run | pool pages | wall s | programs/min | vs roomy | whole | scheduler |")
    print("|---|---|---|---|---|---|---|")
    for name, pages, secs, whole, rc, sched in rows:
        ppm = 60.0 * whole / secs
        print("| %s | %d | %.1f | %.1f | %.2fx | %d of %d | %s |" % (name, pages, secs, ppm, ppm / base if base else 0.0,
                                                               whole, args.copies, sched.strip("[]") or "-"))


def compare(args, configs, run, blocks, want):
    """Each configuration with both binaries, alternating; their medians and ratio."""
    print()
    print("| run | pool pages | %s wall s (median of %d) | %s wall s | ratio | whole (all runs) |"
          % (os.path.basename(args.baseline), args.rounds, os.path.basename(args.chorus)))
    print("|---|---|---|---|---|---|")
    for name, pages, extra in configs:
        if name == "none":
            continue  # it fails at once by design: nothing to time
        times = {"base": [], "this": []}
        whole = 0
        for _ in range(args.rounds):
            for who, binary in (("base", args.baseline), ("this", args.chorus)):
                secs, p = run(args.copies, pages, *extra, chorus=binary)
                reports = [l for l in p.stderr.splitlines() if l.startswith("[tool_agent#")]
                whole += sum(1 for l in reports if "ended by all roles done" in l and blocks(l) == want)
                times[who].append(secs)
        b, t = statistics.median(times["base"]), statistics.median(times["this"])
        print("| %s | %d | %.2f | %.2f | %.3fx | %d of %d |" % (name, pages, b, t, t / b, whole,
                                                               2 * args.rounds * args.copies), flush=True)


if __name__ == "__main__":
    main()
