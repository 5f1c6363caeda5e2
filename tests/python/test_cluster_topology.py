#!/usr/bin/env python3
"""Topology programs and HTTP programs together through a coordinator: a real etcd, three
`chorus node --etcd` processes (one thread each) and one `chorus coordinator`. Twelve topology
programs (`chorus run --cluster URL FILE.yaml`, four questions three times) and twelve chat
programs of two turns run at once — 24 programs. Each topology program prints what one
`chorus run` of the same file prints on one engine; each chat program answers as one `chorus
serve` answers the same conversation alone (greedy), or diverges from it first at a near-tie of
that reply's own log-probabilities (the two best tokens within NEAR_TIE nats: a decode batched
with other sequences sums its products in another order than a decode alone, on one node as on
three); and the programs spread over the three nodes. A probe that watches a block grow asks as
the block grows through the coordinator, and leaves the answer as one engine gives it. Then a long topology program runs, alone, and its node is killed
(SIGKILL): it starts again on a survivor and prints what one engine prints. Last, the long program
again, sent to both coordinators (`--cluster ONE,TWO`), and the leader killed under it: it starts
again through the standby once that leads, and prints what one engine prints.

    test_cluster_topology.py CHORUS_BINARY MODEL TOPOLOGY
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import Harness, free_port, get, serving, wait_for  # noqa: E402

chorus, model, topo = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"
LONG = "Write a long story about a dragon and a lighthouse."
LONG_SET = ["--set", "actors.thinker.max_tokens=200", "--set", "actors.thinker.stop=[]"]
QUESTIONS = ["Name three colours.", "Name three fruits.", "What is two plus two?", "Name a large animal."]
CHATS = ["Say hello to %s." % n for n in ("Ada", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ivy", "Jo", "Kai",
                                           "Lu")]
NEAR_TIE = 0.1
tmp = tempfile.mkdtemp(prefix="chorus-topo-")
h = Harness(tmp)
check, start, procs = h.check, h.start, h.procs


def chat(url, program, messages):
    """The reply's text and its tokens' log-probabilities (with the best two at each)."""
    body = json.dumps({"model": MODEL_NAME, "messages": messages, "max_tokens": 16, "temperature": 0,
                       "program_id": program, "logprobs": True, "top_logprobs": 2}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            c = json.loads(r.read())["choices"][0]
            return c["message"]["content"], c["logprobs"]["content"]
    except urllib.error.HTTPError as e:
        return "HTTP %d %s" % (e.code, e.read()[:200]), []


def conversation(url, program, greeting):
    """Two turns; returns both replies (text, logprobs)."""
    first = [{"role": "user", "content": greeting}]
    r1 = chat(url, program, first)
    r2 = chat(url, program, first + [{"role": "assistant", "content": r1[0]},
                                     {"role": "user", "content": "Now say goodbye."}])
    return [r1, r2]


def agrees(got, want):
    """'same': both turns' texts equal; ('tie', gap): the first token that differs is, in `want`'s own
    log-probabilities, one of its best two within `gap` of the best; ('apart', why) otherwise."""
    for turn, ((gtext, glp), (wtext, wlp)) in enumerate(zip(got, want)):
        if gtext == wtext:
            continue
        for i, (g, w) in enumerate(zip(glp, wlp)):
            if g["token"] == w["token"]:
                continue
            best = {t["token"]: t["logprob"] for t in w["top_logprobs"]}
            if g["token"] in best:
                gap = max(best.values()) - best[g["token"]]
                return ("tie", gap) if gap <= NEAR_TIE else ("apart", "turn %d token %d: gap %.3f" % (turn, i, gap))
            return ("apart", "turn %d token %d: %r is not among %s" % (turn, i, g["token"], list(best)))
        return ("apart", "turn %d: %r vs %r" % (turn, gtext, wtext))
    return ("same", 0)


def run_topology(args, question):
    p = subprocess.run([chorus, "run", topo, "--input", question] + args, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


try:
    # The oracles: each question on one engine; each chat on one `chorus serve`.
    want_topo = {}
    for q in QUESTIONS:
        rc, out, err = run_topology(["-t", "1"], q)
        want_topo[q] = out
        check(rc == 0 and out.strip(), "one engine answers %r: %r" % (q, out.strip()[:40]))
    rc, want_long, err = run_topology(["-t", "1"] + LONG_SET, LONG)
    check(rc == 0 and len(want_long) > 200, "one engine writes the long story (%d characters)" % len(want_long))
    sport = free_port()
    serve_url = "http://127.0.0.1:%d" % sport
    serve = start([chorus, "serve", "--model", model, "--port", str(sport), "-t", "1"],
                  "serve.log")
    wait_for(lambda: get(serve_url + "/health"), 60)
    want_chat = {c: conversation(serve_url, "oracle-%d" % i, c) for i, c in enumerate(CHATS)}
    # `chorus serve` runs a topology program too (POST /programs/run), on its own engine.
    rc, out, err = run_topology(["--cluster", serve_url], QUESTIONS[0])
    check(rc == 0 and out == want_topo[QUESTIONS[0]] and "on node local" in err,
          "`chorus serve` runs the topology as one engine does: %r" % err.strip()[-120:])
    serve.terminate()
    serve.wait(timeout=30)

    etcd_url = h.etcd()
    for name in ("a", "b", "c"):
        start([chorus, "node", "--model", model, "--etcd", etcd_url, "--name", name, "--endpoint",
               "tcp://127.0.0.1:*", "--pages", "256", "-t", "1", "--lease-ttl", "3", "--budget", "2048"],
              "node-%s.log" % name)
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    coord_log = os.path.join(tmp, "coord.log")
    start([chorus, "--log-level", "info", "coordinator", "--model", model, "--etcd", etcd_url, "--name", "one",
           "--port", str(port), "--lease-ttl", "3"], coord_log)
    check(wait_for(lambda: serving(url, ("a", "b", "c")), 60) is not None, "three nodes up and served")
    # A standby, for the last case: `one` leads (it started first and serves).
    url2 = "http://127.0.0.1:%d" % free_port()
    coord2_log = os.path.join(tmp, "coord-two.log")
    start([chorus, "--log-level", "info", "coordinator", "--model", model, "--etcd", etcd_url, "--name", "two",
           "--port", url2.rsplit(":", 1)[1], "--lease-ttl", "3"], coord2_log)
    check(wait_for(lambda: (get(url2 + "/cluster") or {}).get("coordinator", {}).get("leader") is False, 60)
          is not None, "`two` stands by")

    # Placement goes by room, which a node's link learns from its heartbeats: every node's pool
    # known before the 24 programs go out (a node still loading would get none of them).
    def pools_known():
        nodes = (get(url + "/cluster") or {}).get("nodes", [])
        return len(nodes) == 3 and all(n.get("up") and n.get("pages_total", 0) > 0 for n in nodes)
    check(wait_for(pools_known, 60) is not None, "every node's pool is known to the coordinator")

    # 24 programs at once: 12 topology programs and 12 chat programs of two turns.
    topo_results, chat_results = {}, {}

    def topo_job(i):
        q = QUESTIONS[i % len(QUESTIONS)]
        topo_results[i] = (q,) + run_topology(["--cluster", url], q)

    def chat_job(i):
        chat_results[i] = conversation(url, "chat-%d" % i, CHATS[i])

    t0 = time.time()
    threads = [threading.Thread(target=topo_job, args=(i,)) for i in range(12)]
    threads += [threading.Thread(target=chat_job, args=(i,)) for i in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=400)
    print("24 programs in %.1f s" % (time.time() - t0), flush=True)

    same_topo = sum(1 for i, (q, rc, out, err) in topo_results.items() if rc == 0 and out == want_topo[q])
    check(same_topo == 12, "12 of 12 topology programs print what one engine prints (%d)" % same_topo)
    for i, (q, rc, out, err) in sorted(topo_results.items()):
        if rc != 0 or out != want_topo[q]:
            print("  topology %d (%r): rc %d, %r vs %r; %s" % (i, q, rc, out[:60], want_topo[q][:60], err[-300:]))
    verdicts = {i: agrees(r, want_chat[CHATS[i]]) for i, r in chat_results.items()}
    for i, v in sorted(verdicts.items()):
        if v[0] != "same":
            print("  chat %d: %s %s: %r vs %r" % (i, v[0], v[1], [t for t, _ in chat_results[i]],
                                                 [t for t, _ in want_chat[CHATS[i]]]))
    same = sum(1 for v in verdicts.values() if v[0] == "same")
    ties = sum(1 for v in verdicts.values() if v[0] == "tie")
    check(len(verdicts) == 12 and same + ties == 12,
          "12 of 12 chat programs answer as one `chorus serve` alone: %d identical, %d diverging first at a "
          "near-tie (within %.2f nats)" % (same, ties, NEAR_TIE))
    topo_nodes = {}
    for i, (q, rc, out, err) in topo_results.items():
        for line in err.splitlines():
            if " on node " in line:
                n = line.split(" on node ")[1].split(":")[0]
                topo_nodes[n] = topo_nodes.get(n, 0) + 1
    chat_nodes = {}
    for p in (get(url + "/programs") or {"data": []})["data"]:
        chat_nodes[p["node"]] = chat_nodes.get(p["node"], 0) + 1
    # Placement goes by room as each program arrives, so which kind lands where depends on what
    # has ended by then (a CI run once put all twelve short topology programs on two nodes while
    # the third held chats): the 24 together must reach every node.
    check(len(set(topo_nodes) | set(chat_nodes)) == 3,
          "the programs spread over the three nodes: topology %s, chat %s" % (topo_nodes, chat_nodes))

    # A probe that watches the answer grow runs through the coordinator too: the node tells the
    # coordinator's link when the block grows (WatchBlock / BlockGrown), and the probe asks every 8
    # new tokens while the thinker writes. It reads a scratch block, so the answer is unchanged.
    watch = open(topo).read().replace("    to: [out]\n", "    to: [out]\n  watcher:\n    kind: probe\n"
                                      "    watch: answer\n    every_new_tokens: 8\n    view: [prompt, answer]\n"
                                      "    question: \" Done?\"\n    candidates: [\" yes\", \" no\"]\n"
                                      "    threshold: 0\n    edge: false\n    fires: looked\n"
                                      "  seen:\n    kind: sink\n    to: stderr\n    on: [looked]\n", 1)
    wfile = os.path.join(tmp, "watch.yaml")
    open(wfile, "w").write(watch)
    p = subprocess.run([chorus, "run", wfile, "--cluster", url, "--input", QUESTIONS[0]], capture_output=True,
                       text=True, timeout=120)
    looks = p.stderr.count("[looked]")
    check(p.returncode == 0 and p.stdout == want_topo[QUESTIONS[0]] and looks >= 1,
          "a probe watching the answer asks through the coordinator (%d times) and the answer is one engine's: "
          "%s" % (looks, p.stderr.strip()[-200:]))
    p = subprocess.run([chorus, "run", topo, "--cluster", url, "--set", "actors.thinker.max_tokens=oops"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "answered 400" in p.stderr and "max_tokens" in p.stderr,
          "a topology that does not load is refused with its error: %s" % p.stderr.strip()[-160:])
    log = open(coord_log).read()
    check(log.count("topology program `topology-") >= 24, "the coordinator logged each placement and end")

    # A node dies under a topology program: it starts again on a survivor, whole.
    def placements():
        return [l for l in open(coord_log).read().splitlines() if "topology program" in l and "placed on `" in l]

    before = len(placements())
    long_result = {}
    th = threading.Thread(target=lambda: long_result.update(r=run_topology(["--cluster", url] + LONG_SET, LONG)))
    th.start()
    check(wait_for(lambda: len(placements()) > before, 60) is not None, "the long program is placed")
    victim = placements()[-1].split("placed on `")[1].split("`")[0]
    time.sleep(0.5)
    t_kill = time.time()
    [p for p in procs if p.args[:2] == [chorus, "node"] and p.args[p.args.index("--name") + 1] == victim][0].kill()
    th.join(timeout=300)
    rc, out, err = long_result.get("r", (-1, "", "no answer"))
    print("the long program ended %.1f s after node %s's SIGKILL" % (time.time() - t_kill, victim), flush=True)
    check(rc == 0 and out == want_long and "node %s was lost under the program" % victim in err,
          "the long program, its node killed under it, starts again on a survivor and prints what one engine "
          "prints: %s" % err.strip()[-300:])
    check("lost its node `%s`: it starts again elsewhere" % victim in open(coord_log).read(),
          "the coordinator logged the restart")

    # The leader dies under a topology program sent to both coordinators: the program starts
    # again through the standby once it leads (its roles died with the leader), whole.
    before = len(placements())
    long_result = {}
    th = threading.Thread(target=lambda: long_result.update(
        r=run_topology(["--cluster", url + "," + url2] + LONG_SET, LONG)))
    th.start()
    check(wait_for(lambda: len(placements()) > before, 60) is not None, "the long program is placed by `one`")
    time.sleep(0.5)
    t_kill = time.time()
    [p for p in procs if p.args[:2] == [chorus, "--log-level"] and "one" in p.args][0].kill()
    th.join(timeout=300)
    rc, out, err = long_result.get("r", (-1, "", "no answer"))
    print("the long program ended %.1f s after the leader's SIGKILL" % (time.time() - t_kill), flush=True)
    check(rc == 0 and out == want_long and ("coordinator %s was lost under the program" % url) in err,
          "the long program, its coordinator killed under it, starts again through the standby and prints "
          "what one engine prints: %s" % err.strip()[-300:])
    log2 = open(coord2_log).read()
    check("topology program `topology-" in log2 and "placed on `" in log2,
          "the new leader placed it: %s" % [l for l in log2.splitlines() if "topology program" in l][-1:])
    name = os.path.splitext(os.path.basename(topo))[0]  # the program's name on its node
    left = [l for l in log2.splitlines() if "(`%s`) left by a predecessor is not taken over" % name in l]
    check(len(left) == 1 and left[0].endswith("terminated"),
          "the new leader ended what the dead one left of it on its node: %s" % left)
finally:
    h.finish()
