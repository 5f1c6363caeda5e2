#!/usr/bin/env python3
"""A topology program whose node dies goes on from the coordinator's journal: a real etcd, two
`chorus node --etcd` processes (one thread each) and one `chorus coordinator`. The program is
topologies/tool_agent.yaml's agent with two outward effects added: its tool appends a line to a
file each time it runs, and a file sink writes the solver's text. Its node is killed (SIGKILL)
once the tool has run and the solver has answered, while a teller counts (300 tokens) after it. Asserted: the program
prints what one engine prints of it (greedy); the tool ran once in all (its file has one line,
as one engine's has); the file sink's file is one engine's, byte for byte (nothing written twice);
`chorus run` says how much the journal gave back (the solver's two generations, before and
after the call, and the call's result).

    test_cluster_resume.py CHORUS_BINARY MODEL TOOL_AGENT_YAML
"""
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import Harness, free_port, serving, wait_for  # noqa: E402

chorus, model, tool_agent = sys.argv[1], sys.argv[2], sys.argv[3]
tmp = tempfile.mkdtemp(prefix="chorus-resume-")
h = Harness(tmp)
check, start, procs = h.check, h.start, h.procs


def program(where):
    """tool_agent.yaml with its tool counting its runs in `where`/calls.txt, the solver's text also
    in a file sink (`where`/log.txt), and a teller that counts to a thousand in a block of its own
    once the solver is done (the node dies under it)."""
    os.makedirs(where, exist_ok=True)
    text = open(tool_agent).read()
    count = "open('%s/calls.txt', 'a').write('ran' + chr(10)); " % where
    text = text.replace('command: [python3, -c, "import json, sys; ',
                        'write: %s\n    command: [python3, -c, "import json, sys; %s' % (where, count), 1)
    text = text.replace("    to: [out]\n", "    to: [out, log]\n", 1)
    text = text.replace("  work:", "  story:\n  work:", 1)
    # The tool's events to stderr: on stdout they would interleave with the solver's stream as the
    # tool's time decides (a call the journal answers takes none).
    text = text.replace("    to: stdout\n    on: [solver.tool_call", "    to: stderr\n    on: [solver.tool_call", 1)
    text += """
  teller:
    kind: thinker
    after: [solver.done]
    view: [story]
    writes: story
    prefill: "Count from 1 to 1000, separated by commas: 1, 2, 3,"
    max_tokens: 300
    to: [told, log]

  told:
    kind: sink
    to: stdout

  log:
    kind: sink
    to: {file: %s/log.txt}
""" % where
    path = os.path.join(where, "agent.yaml")
    open(path, "w").write(text)
    return path


def lines(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


try:
    one = os.path.join(tmp, "one")
    p = subprocess.run([chorus, "run", program(one), "-t", "1"], capture_output=True, text=True, timeout=300)
    want = p.stdout
    check(p.returncode == 0 and "[solver.tool_result] 42" in p.stderr and lines(one + "/calls.txt") == ["ran"],
          "one engine: the solver calls the tool once, then the teller writes (%d characters): %s" %
          (len(want), (p.stderr.strip() or want.strip())[-200:]))
    want_log = open(one + "/log.txt").read()

    etcd_url = h.etcd()
    for name in ("a", "b"):
        start([chorus, "node", "--model", model, "--etcd", etcd_url, "--name", name, "--endpoint",
               "tcp://127.0.0.1:*", "--pages", "256", "-t", "1", "--lease-ttl", "2"], "node-%s.log" % name)
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    coord_log = os.path.join(tmp, "coord.log")
    start([chorus, "--log-level", "info", "coordinator", "--model", model, "--etcd", etcd_url, "--port", str(port),
           "--lease-ttl", "2", "--heartbeat", "0.25", "--dead-after", "1.5"], coord_log)
    check(wait_for(lambda: serving(url, ("a", "b")), 60) is not None, "two nodes up and served")

    two = os.path.join(tmp, "two")
    agent = program(two)
    result = {}
    th = threading.Thread(target=lambda: result.update(r=subprocess.run(
        [chorus, "run", agent, "--cluster", url], capture_output=True, text=True, timeout=300)))
    th.start()
    check(wait_for(lambda: lines(two + "/calls.txt") or None, 120) is not None, "the tool ran on the cluster")
    time.sleep(0.5)  # the solver's answer after the tool's result (a few tokens); the teller begins
    placed = [l for l in open(coord_log).read().splitlines() if "placed on `" in l]
    victim = placed[-1].split("placed on `")[1].split("`")[0]
    t_kill = time.time()
    [p for p in procs if p.args[:2] == [chorus, "node"] and p.args[p.args.index("--name") + 1] == victim][0].kill()
    th.join(timeout=300)
    p = result.get("r")
    print("the program ended %.1f s after node %s's SIGKILL" % (time.time() - t_kill, victim), flush=True)
    check(p is not None and p.returncode == 0 and "node %s was lost under the program" % victim in p.stderr,
          "the program lost its node and went on on the other: %s" % (p.stderr.strip()[-300:] if p else "no answer"))
    check(p is not None and p.stdout == want and "[solver.tool_result] 42" in p.stderr,
          "it printed what one engine prints%s" %
          ("" if p is None or p.stdout == want else ": %r against %r" % (p.stdout, want)))
    check(lines(two + "/calls.txt") == ["ran"], "the tool ran once in all: %s" % lines(two + "/calls.txt"))
    got_log = open(two + "/log.txt").read() if os.path.exists(two + "/log.txt") else ""
    check(got_log == want_log, "the file sink wrote one engine's text once (%d bytes, one engine %d)" %
          (len(got_log), len(want_log)))
    taken = [l for l in (p.stderr if p else "").splitlines() if "taken again from the coordinator's journal" in l]
    check(len(taken) == 1 and "2 generations" in taken[0] and "1 tool results" in taken[0],
          "the journal gave back the solver's two generations and the call's result: %s" % taken)
    metrics = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    series = {l.split()[0]: float(l.split()[1]) for l in metrics.splitlines()
              if l.startswith(("chorus_cluster_topology_restarts_total", "chorus_cluster_journal_"))}
    check(series.get("chorus_cluster_topology_restarts_total") == 1 and
          series.get("chorus_cluster_journal_generations_total") == 2 and
          series.get("chorus_cluster_journal_tool_results_total") == 1 and
          series.get("chorus_cluster_journal_tokens_total", 0) > 0,
          "/metrics counts the restart and what the journal gave back: %s" % series)
finally:
    h.finish()
