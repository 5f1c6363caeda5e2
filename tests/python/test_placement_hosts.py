#!/usr/bin/env python3
"""Actors placed on other hosts (docs/cluster.md, "Placing actors"): network namespaces the test
makes (netns_hosts.py) — etcd and the coordinator on `hub`, a model node on `na`, actors-only nodes
(`chorus node --no-model`) labelled role=edge on `edge1` and `edge2` and role=tools on `tools`,
every ZeroMQ link under CURVE. tests/data/topologies/placed_agent.yaml runs through the
coordinator with its tool sandbox on the tools node and its log sink on an edge node:

  - its output and its log are those of the same topology on one engine (greedy), the tool ran in
    the tools node's sandbox, /cluster lists each node's labels and what it hosts;
  - the edge node hosting the log is cut off while the tool runs: the log is hosted again on the
    other edge node and the program ends whole, its log the one engine's;
  - both edge nodes cut off: the program ends with an error naming the placement;
  - tests/data/topologies/placed_bridge.yaml, a sensor loop: its source and its sink on an edge node
    (ZeroMQ SUB and PUB there), readings published from the test's host, a status line back from
    the edge node's address for each;
  - tests/data/topologies/placed_monitor.yaml, a log monitor: its source, its probe and its
    incidents sink on an edge node, the probe's forwards on the model node: the incidents of one
    engine, every one the log generator injected;
  - its probe alone on an edge node (the source on the model node, the sink on the tools node),
    that node cut off while it judges: the probe is hosted again on the other edge node, asks again
    what its lost self had out, and the program ends whole with the one engine's 5 incidents.

    test_placement_hosts.py CHORUS_BINARY MODEL TOPOLOGY BRIDGE_TOPOLOGY MONITOR_TOPOLOGY PYTHON_WITH_PYZMQ
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import get, print_logs, serving, stop_all, wait_for  # noqa: E402
from netns_hosts import require_hosts  # noqa: E402

chorus, model, topology, bridge, monitor, pyzmq = sys.argv[1:7]
TTL = 2
PLACED = "/tmp/chorus-placed"  # the topology's tool writes where it ran here; its log sink writes here
LOGGEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "topologies", "loggen.py")
failures, passed, procs = [], [], []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    (passed if cond else failures).append(what)


hosts = require_hosts(["hub", "na", "edge1", "edge2", "tools"])

tmp = tempfile.mkdtemp(prefix="chorus-placement-")
shutil.rmtree(PLACED, ignore_errors=True)
os.makedirs(PLACED)


def start(host, args, log, env=None):
    p = subprocess.Popen(hosts.run_args(host, args), stdout=open(os.path.join(tmp, log), "w"),
                         stderr=subprocess.STDOUT, env=env)
    procs.append(p)
    return p


def read(path):
    try:
        return open(path).read()
    except OSError:
        return ""


def split_report(out):
    """A run's output without its last line (the report, which names where it ran and times it)."""
    lines = out.rstrip("\n").split("\n")
    return "\n".join(l for l in lines if not l.startswith("[") or "ended by" not in l)


try:
    hub = hosts.address["hub"]
    # The oracle: the same topology on one engine, here.
    r = subprocess.run([chorus, "run", topology, "--model", model], capture_output=True, text=True, timeout=120)
    want_out, want_log = split_report(r.stdout), read(PLACED + "/log.txt")
    check(r.returncode == 0 and "A: 42" in want_log and read(PLACED + "/ran").startswith("/tmp"),
          "the topology on one engine: the tool answers, the log is written")

    etcd = "http://%s:2379" % hub
    procs.append(subprocess.Popen(hosts.etcd_args("hub", os.path.join(tmp, "etcd"), os.path.join(tmp, "etcd.log")),
                                  stdout=open(os.path.join(tmp, "etcd.out"), "w"), stderr=subprocess.STDOUT))
    check(wait_for(lambda: get(etcd + "/health"), 20) is not None, "etcd answers on hub")
    for who in ("hub", "na", "edge1", "edge2", "tools"):
        subprocess.run([chorus, "keygen", os.path.join(tmp, who)], check=True, capture_output=True)

    def node(name, *extra, env=None):
        return start(name, [chorus, "node", "--etcd", etcd, "--name", name,
                            "--endpoint", "tcp://%s:5555" % hosts.address[name], "--lease-ttl", str(TTL),
                            "--curve-key", os.path.join(tmp, name + ".key"),
                            "--allow-keys", os.path.join(tmp, "hub.pub"), *extra], "node-%s.log" % name, env=env)

    node("na", "--model", model, "--pages", "64", "-t", "1")
    node("edge1", "--no-model", "--label", "role=edge")
    node("edge2", "--no-model", "--label", "role=edge")
    sandboxes = os.path.join(tmp, "tools-sandboxes")
    os.makedirs(sandboxes)
    node("tools", "--no-model", "--label", "role=tools", env=dict(os.environ, CHORUS_SANDBOX_DIR=sandboxes))
    url = "http://%s:8100" % hub
    start("hub", [chorus, "--log-level", "info", "coordinator", "--etcd", etcd, "--name", "hub", "--model", model,
                  "--host", hub, "--port", "8100", "--lease-ttl", str(TTL), "--heartbeat", "0.25",
                  "--dead-after", "1.5", "--placement-wait", "5", "--curve-key", os.path.join(tmp, "hub.key")],
          "coord.log")

    def nodes():
        return {n["name"]: n for n in (get(url + "/cluster") or {"nodes": []})["nodes"]}

    names = ["edge1", "edge2", "na", "tools"]
    t = wait_for(lambda: sorted(n for n, v in nodes().items() if v["up"]) == names, 90)
    check(t is not None, "the coordinator sees the four nodes up over CURVE: %s" % sorted(nodes()))
    v = nodes()
    check(v["edge1"]["labels"] == {"role": "edge"} and v["tools"]["labels"] == {"role": "tools"} and
          v["edge1"]["actors_only"] and not v["na"]["actors_only"] and v["edge1"]["model"] is None,
          "/cluster lists each node's labels, and the actors-only ones")
    check(wait_for(lambda: serving(url, ["na"]), 30) is not None, "the coordinator serves on na (the model node)")

    def run_placed(tool_s, env=None):
        return subprocess.Popen([chorus, "run", "--cluster", url, topology, "--set", "tool_s=%g" % tool_s],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    # 1. Placed as its file says.
    os.remove(PLACED + "/log.txt")
    p = run_placed(0)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0 and split_report(out) == want_out and read(PLACED + "/log.txt") == want_log,
          "through the coordinator, its tool and its log placed elsewhere: the output and log of one engine"
          + ("" if p.returncode == 0 else ": " + err.strip()[-300:]))
    check(read(PLACED + "/ran").startswith(sandboxes),
          "the tool ran in the tools node's sandbox: %s" % read(PLACED + "/ran"))
    edge_logs = read(os.path.join(tmp, "node-edge1.log")) + read(os.path.join(tmp, "node-edge2.log"))
    check("hosting program placed_agent's sink `log`" in edge_logs and
          "hosting program placed_agent's tool sandbox" in read(os.path.join(tmp, "node-tools.log")),
          "an edge node hosted the log, the tools node the sandbox")

    # 2. The edge node hosting the log is cut off while the tool runs: the log moves.
    os.remove(PLACED + "/log.txt")
    p = run_placed(6)
    t = wait_for(lambda: any("placed_agent/log" in n["hosts"] for n in nodes().values()), 60)
    holder = next((name for name, n in nodes().items() if "placed_agent/log" in n["hosts"]), None)
    check(t is not None and holder in ("edge1", "edge2"), "the log is hosted on %s" % holder)
    time.sleep(1)
    t_cut = time.time()
    hosts.cut(holder)
    out, err = p.communicate(timeout=120)
    other = "edge2" if holder == "edge1" else "edge1"
    check(p.returncode == 0 and split_report(out) == want_out and read(PLACED + "/log.txt") == want_log,
          "%s cut off under the program: it ends whole %.1f s later, its output and log those of one engine%s"
          % (holder, time.time() - t_cut, "" if p.returncode == 0 else ": " + err.strip()[-300:]))
    check(read(os.path.join(tmp, "node-%s.log" % other)).count("hosting program placed_agent's sink `log`") >= 1,
          "the log was hosted again on %s" % other)
    hosts.heal(holder)
    check(wait_for(lambda: nodes().get(holder, {}).get("up"), 60) is not None, "%s is back" % holder)

    # 3. No edge node left: the program ends with an error naming the placement.
    p = run_placed(6)
    t = wait_for(lambda: any("placed_agent/log" in n["hosts"] for n in nodes().values()), 60)
    time.sleep(1)
    hosts.cut("edge1")
    hosts.cut("edge2")
    out, err = p.communicate(timeout=120)
    check(p.returncode != 0 and "a node labelled role=edge" in err,
          "with both edge nodes cut off the program fails, naming the placement: " +
          next((l for l in err.splitlines() if "role=edge" in l), err.strip()[-240:]))
    for e in ("edge1", "edge2"):
        hosts.heal(e)
    check(wait_for(lambda: all(nodes().get(e, {}).get("up") for e in ("edge1", "edge2")), 60) is not None,
          "both edge nodes are back")

    # 4. A sensor loop: readings in on an edge node, a status line per reading out from it.
    edge_out = "tcp://%s:5702" % hosts.address["edge1"]  # (placed by name: the socket binds there)
    p = subprocess.Popen([chorus, "run", "--cluster", url, bridge, "--set", "in=tcp://%s:5801" % hosts.bridge_address,
                          "--set", "out=" + edge_out, "--set", "budget.seconds=40",
                          "--set", "actors.feed.node=edge1", "--set", "actors.pub.node=edge1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    loop = subprocess.run([pyzmq, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sensor_loop.py"),
                           "tcp://%s:5801" % hosts.bridge_address, edge_out, "5"],
                          capture_output=True, text=True, timeout=120)
    p.terminate()
    p.communicate(timeout=60)
    replies = [l for l in loop.stdout.splitlines() if l.startswith("reply ")]
    check(loop.returncode == 0 and len(replies) == 5,
          "5 readings published here, 5 status lines back from edge1's address: %s" %
          (replies[-1] if replies else loop.stdout.strip()[-200:] + loop.stderr.strip()[-200:]))
    check(any("hosting program placed_bridge's source's feed `feed`" in l
              for l in read(os.path.join(tmp, "node-edge1.log")).splitlines()),
          "edge1 hosted the source's feed and the sink")

    # 5. A log monitor whose source, probe and sink run on an edge node.
    app_log, incidents = PLACED + "/app.log", PLACED + "/incidents.txt"
    gen = subprocess.run([sys.executable, LOGGEN, app_log, "--lines", "200", "--incidents", "4",
                          "--rate", "0", "--seed", "7"], capture_output=True, text=True, check=True)
    truth = [json.loads(l)["text"] for l in gen.stdout.splitlines()]
    r = subprocess.run([chorus, "run", monitor, "--model", model], capture_output=True, text=True, timeout=180)
    want_incidents = read(incidents)
    check(r.returncode == 0 and len(want_incidents.splitlines()) == 4 and
          all(t in want_incidents for t in truth), "the monitor on one engine reports the 4 injected incidents")
    os.remove(incidents)
    p = subprocess.run([chorus, "run", "--cluster", url, monitor], capture_output=True, text=True, timeout=180)
    check(p.returncode == 0 and sorted(read(incidents).splitlines()) == sorted(want_incidents.splitlines()),
          "through the coordinator, its source, probe and sink on an edge node: the incidents of one engine"
          + ("" if p.returncode == 0 else ": " + p.stderr.strip()[-300:]))
    edge_logs = read(os.path.join(tmp, "node-edge1.log")) + read(os.path.join(tmp, "node-edge2.log"))
    check("hosting program placed_monitor's probe `watch`" in edge_logs, "an edge node hosted the probe")
    p = subprocess.run([chorus, "run", "--cluster", url, monitor, "--set", "actors.last.node=edge1"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode != 0 and "actors.last: a writer placed on node `edge1` is not carried yet" in p.stderr,
          "a placed writer is refused, named: " + p.stderr.strip()[-200:])

    # 6. The probe alone on an edge node, cut off while it judges: it is hosted again on the other.
    os.remove(incidents)
    gen = subprocess.run([sys.executable, LOGGEN, app_log + ".long", "--lines", "300",
                          "--incidents", "5", "--rate", "0", "--seed", "11"], capture_output=True, text=True,
                         check=True)
    r = subprocess.run([chorus, "run", monitor, "--model", model, "--set", "log=" + app_log + ".long"],
                       capture_output=True, text=True, timeout=300)
    want_long = set(read(incidents).splitlines())
    os.remove(incidents)
    p = subprocess.Popen([chorus, "run", "--cluster", url, monitor, "--set", "log=" + app_log + ".long",
                          "--set", "actors.tail.node=na", "--set", "actors.incidents.node=tools"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t = wait_for(lambda: any("placed_monitor/watch" in n["hosts"] for n in nodes().values()), 60)
    holder = next((name for name, n in nodes().items() if "placed_monitor/watch" in n["hosts"]), None)
    check(t is not None and holder in ("edge1", "edge2"), "the probe is hosted on %s" % holder)
    time.sleep(2)
    t_cut = time.time()
    hosts.cut(holder)
    other = "edge2" if holder == "edge1" else "edge1"
    moved = wait_for(lambda: "placed_monitor/watch" in nodes().get(other, {}).get("hosts", []), 60)
    check(moved is not None, "the probe is hosted on %s %.1f s after the cut" % (other, time.time() - t_cut))
    out, err = p.communicate(timeout=300)
    got = set(read(incidents).splitlines())
    check(p.returncode == 0 and got == want_long and len(got) == 5,
          "%s cut off under the probe: the program ends whole %.1f s later with the one engine's incidents "
          "(%d of its %d)%s" % (holder, time.time() - t_cut, len(got & want_long), len(want_long),
                                "" if p.returncode == 0 else ": " + err.strip()[-300:]))
    check(read(os.path.join(tmp, "node-%s.log" % other)).count("hosting program placed_monitor's probe `watch`") >= 1,
          "the probe was hosted again on %s" % other)
    hosts.heal(holder)
finally:
    stop_all(procs)
    hosts.remove()
    if failures:
        print_logs(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(PLACED, ignore_errors=True)
print("%d passed, %d failed" % (len(passed), len(failures)))
sys.exit(1 if failures else 0)
