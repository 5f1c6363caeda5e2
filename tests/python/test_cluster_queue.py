#!/usr/bin/env python3
"""The coordinator's global waiting queue, end to end: a real etcd, two `chorus node --etcd`
processes of 64 KV pages each and one `chorus coordinator --migrate-after 1`. Programs p1 and p3 are
placed on node a, p2 on node b. While p1 streams a long reply that holds most of a's pages, p3's
next turn cannot get room on a: after a second of waiting it moves to b and is answered there.
Resident programs stay where they are. The nodes offer host memory (--host-pages), so p3's pause
while it waits keeps its KV there, and the coordinator's cost model (--move-by cost, its default)
chooses how p3's conversation goes along; the argument WAY says what it should choose:

- recompute: with a recompute rate far above any link's (--recompute-tps), it recomputes: p3 is
  released on a and its conversation prefilled on b from the client's history; the reply is the
  one `chorus serve` gives the same conversation sent as a new program (greedy).
- kv: with the measured constants (the defaults), its KV pages go from a to b; the reply is the
  one `chorus serve` gives when p3 never moved (its second turn in the same block), to the token.

    test_cluster_queue.py CHORUS_BINARY MODEL [recompute|kv]
"""
import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import Harness, free_port, get, serving, wait_for  # noqa: E402

chorus, model = sys.argv[1], sys.argv[2]
way = sys.argv[3] if len(sys.argv) > 3 else "recompute"
by_kv = way == "kv"
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"
tmp = tempfile.mkdtemp(prefix="chorus-queue-")
h = Harness(tmp)
check, start = h.check, h.start


def chat(url, program, messages, max_tokens):
    body = json.dumps({"model": MODEL_NAME, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "program_id": program}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=180) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def reply(body):
    return body["choices"][0]["message"]["content"]


FIRST = {p: [{"role": "user", "content": "Say hello to %s." % p}] for p in ("p1", "p2", "p3")}
LONG = [{"role": "user", "content": "Write a very long story about a lighthouse keeper and the sea."}]
LONG_TOKENS = 700  # with its prompt, about 46 of node a's 64 pages


def second_turn(first_reply):
    return FIRST["p3"] + [{"role": "assistant", "content": first_reply},
                          {"role": "user", "content": "Now list five animals that live in the sea."}]


try:
    # The oracle: p3's two turns on one `chorus serve`.
    sport = free_port()
    serve_url = "http://127.0.0.1:%d" % sport
    serve = start([chorus, "serve", "--model", model, "--port", str(sport), "--pages", "64", "-t", "1"],
                  "serve.log")
    wait_for(lambda: get(serve_url + "/health"), 60)
    # The second turn as the node it moves to computes it: a new block prefilled from the history.
    _, b1 = chat(serve_url, "p3", FIRST["p3"], 12)
    if by_kv:  # ... or with the KV it had: as if it never moved
        _, b2 = chat(serve_url, "p3", second_turn(reply(b1)), 300)
    else:
        _, b2 = chat(serve_url, "p3-fresh", second_turn(reply(b1)), 300)
    want_first, want_second = reply(b1), reply(b2)
    serve.terminate()
    serve.wait(timeout=30)

    etcd_url = h.etcd()
    for name in ("a", "b"):
        start([chorus, "node", "--model", model, "--etcd", etcd_url, "--name", name, "--endpoint",
               "tcp://127.0.0.1:*", "--pages", "64", "-t", "1", "--lease-ttl", "2", "--host-pages", "64"],
              "node-%s.log" % name)
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    coord_log = os.path.join(tmp, "coord.log")
    trace_path = os.path.join(tmp, "coord-trace.json")
    coord = start([chorus, "--log-level", "info", "coordinator", "--etcd", etcd_url, "--name", "one", "--port",
                   str(port), "--lease-ttl", "2", "--heartbeat", "0.25", "--dead-after", "1.5", "--migrate-after", "1",
                   "--trace", trace_path] + ([] if by_kv else ["--recompute-tps", "1e9"]), coord_log)

    def up_names():
        v = get(url + "/cluster") or {"nodes": []}
        return sorted(n["name"] for n in v["nodes"] if n["up"])

    check(wait_for(lambda: up_names() == ["a", "b"] and serving(url, ("a", "b")), 60) is not None,
          "two nodes up and served")

    def nodes_of():
        return {p["program_id"]: p["node"] for p in (get(url + "/programs") or {"data": []})["data"]}

    firsts = {}
    for p in ("p1", "p2", "p3"):
        st, body = chat(url, p, FIRST[p], 12)
        firsts[p] = reply(body) if st == 200 else None
    placed = nodes_of()
    check(placed == {"p1": "a", "p2": "b", "p3": "a"}, "p1 and p3 on a, p2 on b: %s" % placed)
    census = {n["name"]: n["programs"] for n in (get(url + "/cluster") or {"nodes": []})["nodes"]}
    check({k: v["resident"] + v["paused"] for k, v in census.items()} == {"a": 2, "b": 1} and
          (get(url + "/cluster") or {}).get("waiting") == 0,
          "GET /cluster counts each node's programs and an empty queue: %s" % census)
    check(firsts["p3"] == want_first, "p3's first turn is one node's")

    # p1 streams a long reply on a; p3's second turn then waits for room there, and moves.
    long_done = {}

    def long_turn():
        t0 = time.time()
        long_done["status"], long_done["body"] = chat(url, "p1", LONG, LONG_TOKENS)
        long_done["s"] = time.time() - t0

    def pages_used_a():
        return sum(n["pages_used"] for n in (get(url + "/cluster") or {"nodes": []})["nodes"] if n["name"] == "a")

    before = pages_used_a()
    th = threading.Thread(target=long_turn)
    th.start()
    check(wait_for(lambda: pages_used_a() >= before + 3, 60) is not None,
          "p1's long reply is under way on a (its pages reserved: about 46 of 64)")
    t0 = time.time()
    p3 = {}
    p3_th = threading.Thread(target=lambda: p3.update(r=chat(url, "p3", second_turn(firsts["p3"]), 300)))
    p3_th.start()
    # While it waits for room, GET /cluster shows it in the queue, on a.
    seen_waiting = wait_for(lambda: any(n["name"] == "a" and (n.get("programs") or {}).get("waiting", 0) >= 1
                                        for n in (get(url + "/cluster") or {"nodes": []})["nodes"]), 30)
    check(seen_waiting is not None, "GET /cluster shows p3's turn waiting on a (after %.1f s)" % (seen_waiting or -1))
    p3_th.join(timeout=300)
    st, body = p3.get("r", (0, {}))
    p3_s = time.time() - t0
    p1_busy = th.is_alive()
    th.join(timeout=180)
    check(st == 200 and reply(body) == want_second,
          "p3's turn is answered after its move (%s) with the reply of one node %s (%d, %.1f s, p1 still "
          "streaming: %s)" % (way, "where it never moved" if by_kv else "prefilling its history", st, p3_s,
                              p1_busy))
    if st == 200:
        cached = body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        check((cached > 0) == by_kv, "p3's turn on b reused %d tokens of its conversation" % cached)
    after = nodes_of()
    check(after.get("p3") == "b" and after.get("p1") == "a" and after.get("p2") == "b",
          "p3 moved to b; p1 and p2 stayed where their KV is: %s" % after)
    check(long_done.get("status") == 200 and long_done["body"]["usage"]["completion_tokens"] > 0,
          "p1's long reply completes on a (%.1f s)" % long_done.get("s", -1))
    metrics = urllib.request.urlopen(url + "/metrics", timeout=2).read().decode()
    check("chorus_cluster_program_moves_total 1" in metrics, "/metrics counts one move")
    check(("chorus_cluster_kv_moves_total %d" % (1 if by_kv else 0)) in metrics,
          "/metrics counts %d move with its KV" % (1 if by_kv else 0))
    log = open(coord_log).read()
    check("program `p3` waited" in log and "for room on `a`" in log, "the coordinator logged the move")
    if by_kv:
        check("program `p3` takes its KV from `a`" in log and "program `p3` loaded its KV on `b`" in log,
              "the coordinator logged the KV's way")
    else:
        check("program `p3` leaves `a` without its KV:" in log and "positions recompute in" in log,
              "the coordinator logged the cost model's choice")

    # The coordinator's trace, written when it stops: the nodes joining, each placement and the
    # move, and every request as a span naming its program and node.
    coord.terminate()
    coord.wait(timeout=30)
    events = json.load(open(trace_path))["traceEvents"]
    membership = [e["name"] for e in events if e.get("cat") == "membership"]
    check({"joined a", "joined b", "serving on a", "serving on b"} <= set(membership),
          "the trace's membership lane: %s" % membership)
    placement = [(e["name"], e["args"]["node"]) for e in events if e.get("cat") == "placement"]
    check(placement == [("placed p1", "a"), ("placed p2", "b"), ("placed p3", "a"), ("moved for room p3", "a"),
                        ("placed p3", "b")], "the trace's placement lane, in order: %s" % placement)
    ends = [e for e in events if e.get("cat") == "http" and e["ph"] == "e"]
    begins = {e["id"]: e for e in events if e.get("cat") == "http" and e["ph"] == "b"}
    spans = sorted((begins[e["id"]]["args"]["program"], begins[e["id"]]["args"]["node"]) for e in ends
                   if e["id"] in begins and e["args"]["status"] == 200)
    check(spans == [("p1", "a"), ("p1", "a"), ("p2", "b"), ("p3", "a"), ("p3", "b")],
          "a request span per turn, each with its program and node: %s" % spans)
finally:
    h.finish()
