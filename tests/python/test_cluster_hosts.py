#!/usr/bin/env python3
"""A cluster on separate hosts: network namespaces the test makes (netns_hosts.py), each with its
own address on a bridge. etcd and the coordinator on `hub`, model nodes on `na` and `nb`, every
ZeroMQ link between hosts under CURVE (a node's port on an address other machines reach refuses
plaintext). Chat programs run through the coordinator with the replies of one `chorus serve`;
then `na`'s link is cut (a network partition: its process keeps running): it is fenced, its
programs go on on `nb` from their history with the same replies; the link comes back and `na`
joins again as a new member, and serves again. Prints the time each took.

    test_cluster_hosts.py CHORUS_BINARY MODEL
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import free_port, get, print_logs, serving, stop_all, turn_messages, wait_for  # noqa: E402
from netns_hosts import require_hosts  # noqa: E402

chorus, model = sys.argv[1], sys.argv[2]
TTL = 2
PROGRAMS = ["h%d" % i for i in range(4)]
failures, passed, procs = [], [], []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    (passed if cond else failures).append(what)


def chat(url, program, messages, max_tokens=12):
    body = json.dumps({"model": "SmolLM2-135M-Instruct.Q4_1", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "program_id": program}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def run_turn(url, k, history):
    out = {}
    for p in PROGRAMS:
        status, body = chat(url, p, turn_messages(p, k, history.setdefault(p, [])))
        out[p] = (status, body)
        history[p].append(body["choices"][0]["message"]["content"] if status == 200 else "(%d)" % status)
    return out


hosts = require_hosts(["hub", "na", "nb"])

tmp = tempfile.mkdtemp(prefix="chorus-hosts-")


def start(host, args, log):
    argv = hosts.run_args(host, args) if host else args
    p = subprocess.Popen(argv, stdout=open(os.path.join(tmp, log), "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


try:
    hub, na, nb = (hosts.address[h] for h in ("hub", "na", "nb"))
    check(True, "three hosts: hub %s, na %s, nb %s (bridge %s)" % (hub, na, nb, hosts.bridge))

    # The oracle: the same conversations on one `chorus serve` (greedy), here on loopback.
    sport = free_port()
    serve = start(None, [chorus, "serve", "--model", model, "--port", str(sport), "--pages", "64", "-t", "1"],
                  "serve.log")
    wait_for(lambda: get("http://127.0.0.1:%d/health" % sport), 60)
    want = {}
    for k in range(3):
        run_turn("http://127.0.0.1:%d" % sport, k, want)
    serve.terminate()
    serve.wait(timeout=30)
    check(all(len(want[p]) == 3 for p in PROGRAMS), "one `chorus serve` answers 3 turns of 4 programs")

    etcd = "http://%s:2379" % hub
    procs.append(subprocess.Popen(hosts.etcd_args("hub", os.path.join(tmp, "etcd"), os.path.join(tmp, "etcd.log")),
                                  stdout=open(os.path.join(tmp, "etcd.out"), "w"), stderr=subprocess.STDOUT))
    check(wait_for(lambda: get(etcd + "/health"), 20) is not None, "etcd answers on hub, from the test's host")

    for who in ("hub", "na", "nb"):
        subprocess.run([chorus, "keygen", os.path.join(tmp, who)], check=True, capture_output=True)

    def node(name):
        return start(name, [chorus, "node", "--model", model, "--etcd", etcd, "--name", name,
                            "--endpoint", "tcp://%s:5555" % hosts.address[name], "--pages", "64", "-t", "1",
                            "--lease-ttl", str(TTL), "--curve-key", os.path.join(tmp, name + ".key"),
                            "--allow-keys", os.path.join(tmp, "hub.pub")], "node-%s.log" % name)

    # Plaintext on an address other hosts reach is refused.
    r = subprocess.run(hosts.run_args("na", [chorus, "node", "--model", model, "--endpoint", "tcp://%s:5556" % na,
                                             "--pages", "16", "-t", "1"]),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "CURVE" in r.stderr,
          "a node port on a host's address without CURVE is refused: " + r.stderr.strip()[-160:])

    nodes = {n: node(n) for n in ("na", "nb")}
    url = "http://%s:8100" % hub
    start("hub", [chorus, "--log-level", "info", "coordinator", "--etcd", etcd, "--name", "hub",
                  "--host", hub, "--port", "8100", "--lease-ttl", str(TTL), "--heartbeat", "0.25",
                  "--dead-after", "1.5", "--curve-key", os.path.join(tmp, "hub.key")], "coord.log")

    def view():
        return get(url + "/cluster") or {"nodes": []}

    def up():
        return sorted(n["name"] for n in view()["nodes"] if n["up"])

    t = wait_for(lambda: up() == ["na", "nb"], 90)
    check(t is not None, "the coordinator on hub sees na and nb up, over CURVE links: %s" % up())
    keys = {n["name"]: n["curve_key"] for n in view()["nodes"]}
    check(all(keys.get(n) for n in ("na", "nb")), "both nodes registered their CURVE keys")
    check(wait_for(lambda: serving(url, ["na", "nb"]), 30) is not None, "the coordinator serves on both hosts")

    got = {}
    first = run_turn(url, 0, got)
    check(all(st == 200 for st, _ in first.values()) and all(got[p] == want[p][:1] for p in PROGRAMS),
          "turn 1 of 4 programs across the hosts: the replies of one `chorus serve`")
    placed = {p["program_id"]: p["node"] for p in get(url + "/programs")["data"]}
    on_na = sorted(p for p, n in placed.items() if n == "na")
    check(on_na and len(on_na) < len(PROGRAMS), "programs on both hosts: %r" % placed)

    # The partition: na's link goes down; its process goes on, unaware.
    epoch_na = [n["epoch"] for n in view()["nodes"] if n["name"] == "na"][0]
    t_cut = time.time()
    hosts.cut("na")
    t = wait_for(lambda: up() == ["nb"], 30)
    check(t is not None, "na, cut off, is fenced: the coordinator sees only nb up %.1f s after the cut" % (t or -1))
    check(nodes["na"].poll() is None, "na's process still runs behind the partition")
    second = run_turn(url, 1, got)
    check(all(st == 200 for st, _ in second.values()) and all(got[p] == want[p][:2] for p in PROGRAMS),
          "turn 2 of every program, na's too, has the replies of one node (%.1f s after the cut): %s"
          % (time.time() - t_cut, {p: (st, b.get("error", {}).get("message")) for p, (st, b) in second.items()
                                   if st != 200}))
    moved = {p["program_id"]: p["node"] for p in get(url + "/programs")["data"]}
    check(all(moved.get(p) == "nb" for p in on_na), "na's programs %s now run on nb: %r" % (on_na, moved))
    check(all(second[p][0] == 200 and second[p][1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
              for p in on_na),
          "they started again from their history there")

    # The link comes back: na finds its lease gone and joins again as a new member.
    t_heal = time.time()
    hosts.heal("na")
    t = wait_for(lambda: [n for n in view()["nodes"] if n["name"] == "na" and n["up"] and n["epoch"] > epoch_na], 60)
    back = [n["epoch"] for n in view()["nodes"] if n["name"] == "na"]
    check(t is not None, "healed, na joins again as a new member: epoch %d -> %s (%.1f s after the link came back)"
          % (epoch_na, back, time.time() - t_heal))
    log_na = open(os.path.join(tmp, "node-na.log")).read()
    check("lost its lease" in log_na, "na logged that it lost its lease")
    check(wait_for(lambda: serving(url, ["na", "nb"]), 30) is not None, "the coordinator serves on na again")
    # na's process kept the moved programs' old blocks through the partition: the coordinator,
    # serving the new member, ends them there rather than taking them over (they live on nb now).
    after = {p["program_id"]: p["node"] for p in get(url + "/programs")["data"]}
    log_hub = open(os.path.join(tmp, "coord.log")).read()
    check(all(after.get(p) == "nb" for p in on_na) and
          not any("took over program `%s`" % p in log_hub for p in on_na),
          "the moved programs stay on nb; their stale copies on na are not taken over: %r" % after)
    third = run_turn(url, 2, got)
    check(all(st == 200 for st, _ in third.values()) and all(got[p] == want[p] for p in PROGRAMS),
          "turn 3 of every program: the replies of one node, nothing from na's old self mixed in")
    check(all(third[p][1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for p in PROGRAMS),
          "every program's turn 3 found its turn 2 where it ran it")
finally:
    stop_all(procs)
    hosts.remove()
    if failures:
        print_logs(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
print("%d passed, %d failed" % (len(passed), len(failures)))
sys.exit(1 if failures else 0)
