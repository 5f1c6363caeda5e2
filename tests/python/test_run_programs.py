"""`chorus run` with several topology files and --copies: every program runs on one engine, each
gets its own report line, and the files must agree on the engine they share.

  python3 test_run_programs.py CHORUS GOLDENS_DIR
"""
import os
import subprocess
import sys
import tempfile

CHORUS, GOLDENS = sys.argv[1], sys.argv[2]
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
    lines = [l for l in err.splitlines() if l.startswith("[")]
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

    # 16 pages (256 positions) for two programs of 200 tokens: at least one runs out, and that is
    # a failure with its name, not a short answer.
    small_a = write("sa.yaml", topology("small", 200, pages=16))
    rc, err = run(small_a, "--copies", "2")
    check(rc == 1 and "KV cache full" in err and "small#" in err, "the pool running out fails the run, named: %s" %
          err.strip().splitlines()[-1:])

print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
