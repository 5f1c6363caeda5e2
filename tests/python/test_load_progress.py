#!/usr/bin/env python3
"""A progress line while the weights are prepared, when stderr is a terminal (a pseudo-terminal
here): `chorus generate` on a model of K-quants (tests/goldens/tiny_llama_kq.gguf: its matrices
are repacked into panels; the default model's Q4_1 ones are not) shows "preparing the weights
for this CPU" up to 100 %, on one line rewritten in place; with stderr a pipe it shows nothing.

    test_load_progress.py CHORUS_BINARY KQUANT_MODEL
"""
import os
import pty
import subprocess
import sys

chorus, model = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


cmd = [chorus, "generate", "--model", model, "-n", "2", "--temp", "0", "Hello"]
master, slave = pty.openpty()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave)  # a random model's text: bytes
os.close(slave)
out = p.stdout.read()
p.wait(timeout=120)
seen = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
os.close(master)
text = seen.decode(errors="replace")
check(p.returncode == 0 and out.strip(), "generate runs with stderr on a terminal")
check("chorus generate: preparing the weights for this CPU: 100%" in text,
      "a progress line up to 100 %%: %r" % text[-120:])
check(text.count("preparing the weights") >= 1 and
      text.count("preparing the weights") == text.count("\rchorus generate: preparing the weights"),
      "rewritten in place: each update starts with a carriage return")
piped = subprocess.run(cmd, capture_output=True, timeout=120)
check(piped.returncode == 0 and b"preparing the weights" not in piped.stderr, "nothing of it when stderr is a pipe")

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
