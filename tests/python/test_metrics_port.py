#!/usr/bin/env python3
"""`--metrics-port` (gateway/metrics_server.h) on the processes without an HTTP API of their own:
`chorus node` serves Prometheus text whose engine counters move by exactly the tokens a client
ran through the node port (a forward of 5 tokens, a generate of 1 prefill and 6 decode steps),
with its pool's pages; `chorus run` serves its engine's while a topology runs; /health answers;
a port that is taken is refused at start.

    test_metrics_port.py CHORUS_BINARY MODEL TOPOLOGIES_DIR
(run by ctest with PYTHONPATH=build/python:clients/python)
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from chorus_client import ChorusClient

chorus, model, topologies = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def scrape(url):
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(chorus_\w+) (\S+)$", text, re.M)}


node = subprocess.Popen([chorus, "node", "--model", model, "--endpoint", "tcp://127.0.0.1:*", "--pages", "64",
                         "-t", "1", "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)
try:
    first = node.stdout.readline()
    endpoint = first.rsplit(" ", 1)[-1].strip()
    url = None
    for _ in range(5):
        m = re.search(r"metrics on (http://\S+/metrics)", node.stdout.readline())
        if m:
            url = m.group(1)
            break
    check(url is not None, "chorus node says where its metrics are: %s" % url)
    before = scrape(url)
    check(before.get("chorus_engine_steps_total") == 0 and before.get("chorus_pool_pages") == 64 and
          before.get("chorus_pool_used_pages") == 0, "an idle node: no steps, 64 pages, none used")
    c = ChorusClient(endpoint, timeout_ms=30000)
    prompt = c.create_block("prompt")
    c.wait(c.forward(prompt, tokens=[5, 6, 7, 8, 9]))
    out = c.create_block("out")
    events = list(c.events(c.generate(out, view=[prompt], prefill=[3], max_tokens=6)))
    after = scrape(url)
    moved = {k[len("chorus_engine_"):]: after[k] - before.get(k, 0) for k in after if k.startswith("chorus_engine_")}
    print("     moved: %s" % moved)
    check(moved["requests_total"] == 2 and moved["finished_total"] == 2 and after["chorus_engine_in_flight"] == 0,
          "two requests submitted and finished, none in flight")
    # The forward's 5 tokens and the generate's prefill token are prefill; then each of the 6
    # generated tokens is run into the block, one decode step each.
    check(moved["prefill_tokens_total"] == 6 and moved["decode_tokens_total"] == 6 and
          moved["probe_tokens_total"] == 0, "the tokens counted by kind: 6 prefill, 6 decode")
    check(moved["steps_total"] == 8 and moved["busy_seconds_total"] > 0, "8 steps ran (1 + 1 + 6), and took time")
    check(after["chorus_pool_used_pages"] > 0, "the blocks hold pages of the pool now")
    health = urllib.request.urlopen(url.replace("/metrics", "/health"), timeout=10).read().decode()
    check('"ok"' in health, "/health answers")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    taken = subprocess.run([chorus, "node", "--model", model, "--endpoint", "tcp://127.0.0.1:*", "--pages", "16",
                            "--metrics-port", str(port)], capture_output=True, text=True, timeout=120)
    check(taken.returncode != 0 and "cannot bind" in taken.stderr,
          "a metrics port that is taken is refused: " + taken.stderr.strip()[:100])
finally:
    node.send_signal(signal.SIGTERM)
    node.communicate(timeout=60)

run = subprocess.Popen([chorus, "run", os.path.join(topologies, "thinker_writer.yaml"), "--metrics-port", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
line = run.stderr.readline()
m = re.search(r"metrics on (http://\S+/metrics)", line)
check(m is not None, "chorus run says where its metrics are: " + line.strip())
seen = 0
if m:
    deadline = time.time() + 60
    while time.time() < deadline and run.poll() is None:
        try:
            seen = max(seen, scrape(m.group(1)).get("chorus_engine_decode_tokens_total", 0))
        except OSError:
            break
        time.sleep(0.2)
run.communicate(timeout=120)
check(run.returncode == 0 and seen > 0, "chorus run's engine counters move while it runs (%d decoded)" % seen)

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
