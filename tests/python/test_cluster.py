#!/usr/bin/env python3
"""End to end: a real etcd, three `chorus node --etcd` processes and two `chorus coordinator`
processes on loopback, one node under CURVE. Membership, refusals, chat programs served through the leader (the same
replies as one `chorus serve`, placed across the nodes), a node killed while it streams a reply
(the stream goes on elsewhere, whole; its programs go on elsewhere), a node stopped past its
lease, the leader killed. Prints the time each recovery took.

    test_cluster.py CHORUS_BINARY MODEL OTHER_MODEL
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import free_port, serving, turn_messages, wait_for  # noqa: E402

chorus, model, other_model = sys.argv[1], sys.argv[2], sys.argv[3]
TTL = 2  # seconds: the nodes' and coordinators' leases
KEYS = {}  # coordinator URL -> the API key it asks for
failures, passed, procs = [], [], []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    (passed if cond else failures).append(what)


def start(args, log):
    p = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def chat_request(url, program, messages, max_tokens, stream):
    req = {"model": "SmolLM2-135M-Instruct.Q4_1", "messages": messages, "max_tokens": max_tokens,
           "temperature": 0, "program_id": program, "stream": stream}
    if stream:
        req["stream_options"] = {"include_usage": True}
    body = json.dumps(req).encode()
    headers = {"Content-Type": "application/json"}
    if url in KEYS:
        headers["Authorization"] = "Bearer " + KEYS[url]
    return urllib.request.Request(url + "/v1/chat/completions", data=body, headers=headers)


def chat(url, program, messages, max_tokens=12):
    req = chat_request(url, program, messages, max_tokens, False)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


PROGRAMS = ["p%d" % i for i in range(6)]
LONG = [{"role": "user", "content": "Write a long story about a robot who learns to paint."}]
LONG_TOKENS = 200


def stream_chat(url, program, messages, max_tokens, chunks, state):
    """A streamed chat completion; each content delta is appended to `chunks`; state['done'] at the end."""
    req = chat_request(url, program, messages, max_tokens, True)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if "error" in j:
                    state["error"] = j["error"]
                    continue
                if j.get("usage"):
                    state["usage"] = j["usage"]
                for c in j.get("choices", []):
                    if c["delta"].get("content"):
                        chunks.append(c["delta"]["content"])
                    if c.get("finish_reason"):
                        state["finish"] = c["finish_reason"]
    except Exception as e:  # noqa: BLE001
        state["error"] = repr(e)
    state["done"] = True


def run_turn(url, k, history):
    """Turn k of every program; history[program] grows by the reply. Returns {program: (status, body)}."""
    out = {}
    for p in PROGRAMS:
        status, body = chat(url, p, turn_messages(p, k, history.setdefault(p, [])))
        out[p] = (status, body)
        if status == 200:
            history[p].append(body["choices"][0]["message"]["content"])
    return out


def get(url, key=True):
    base = url.rsplit("/", 1)[0] if url.count("/") > 2 else url
    req = urllib.request.Request(url)
    if key and base in KEYS:
        req.add_header("Authorization", "Bearer " + KEYS[base])
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return json.loads(r.read())
    except Exception:
        return None


tmp = tempfile.mkdtemp(prefix="chorus-cluster-")
try:
    cport, pport = free_port(), free_port()
    etcd_url = "http://127.0.0.1:%d" % cport
    peer = "http://127.0.0.1:%d" % pport
    start(["etcd", "--name=t", "--data-dir=" + os.path.join(tmp, "etcd"), "--listen-client-urls=" + etcd_url,
           "--advertise-client-urls=" + etcd_url, "--listen-peer-urls=" + peer,
           "--initial-advertise-peer-urls=" + peer, "--initial-cluster=t=" + peer, "--logger=zap",
           "--log-outputs=" + os.path.join(tmp, "etcd.log")], os.path.join(tmp, "etcd.out"))
    check(wait_for(lambda: get(etcd_url + "/health"), 20) is not None, "etcd answers on " + etcd_url)

    def node(name, model_path=model, extra=()):
        return start([chorus, "node", "--model", model_path, "--etcd", etcd_url, "--name", name,
                      "--endpoint", "tcp://127.0.0.1:*", "--pages", "64", "-t", "1", "--lease-ttl", str(TTL),
                      *extra], os.path.join(tmp, "node-%s.log" % name))

    # CURVE (docs/security.md): node `c` accepts only the two coordinators' keys; `a` and `b`
    # speak plaintext on loopback. Each coordinator links to both kinds.
    for who in ("c", "one", "two"):
        subprocess.run([chorus, "keygen", os.path.join(tmp, who)], check=True, capture_output=True)
    curve_c = ["--curve-key", os.path.join(tmp, "c.key"), "--allow-keys", os.path.join(tmp, "one.pub"),
               "--allow-keys", os.path.join(tmp, "two.pub")]

    def coordinator(name, key=None):
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        extra = ["--curve-key", os.path.join(tmp, name + ".key")]
        if key:
            KEYS[url] = key
            extra += ["--api-key", key]
        start([chorus, "--log-level", "info", "coordinator", "--etcd", etcd_url, "--name", name, "--port", str(port),
               "--lease-ttl", str(TTL), "--heartbeat", "0.25", "--dead-after", "1.5", *extra],
              os.path.join(tmp, "coord-%s.log" % name))
        return url

    # The oracle: the same conversations on one `chorus serve` (greedy).
    sport = free_port()
    serve = start([chorus, "serve", "--model", model, "--port", str(sport), "--pages", "64", "-t", "1"],
                  os.path.join(tmp, "serve.log"))
    wait_for(lambda: get("http://127.0.0.1:%d/health" % sport), 60)
    want = {}
    for k in range(4):
        run_turn("http://127.0.0.1:%d" % sport, k, want)
    _, long_want = chat("http://127.0.0.1:%d" % sport, "long", LONG, LONG_TOKENS)
    long_want = long_want["choices"][0]["message"]["content"]
    serve.terminate()
    serve.wait(timeout=30)
    check(all(len(want[p]) == 4 for p in PROGRAMS), "one `chorus serve` answers 4 turns of 6 programs")

    nodes = {n: node(n, extra=curve_c if n == "c" else ()) for n in ("a", "b", "c")}
    one = coordinator("one")
    wait_for(lambda: get(one + "/health"), 20)
    two = coordinator("two", key="sk-two")  # API keys as `chorus serve`: every route, /cluster too

    def view(url):
        v = get(url + "/cluster")
        return v or {"nodes": [], "coordinator": {}}

    def up_names(url):
        return sorted(n["name"] for n in view(url)["nodes"] if n["up"])

    check(wait_for(lambda: up_names(one) == ["a", "b", "c"], 60) is not None,
          "the coordinator sees three nodes up: %s" % up_names(one))
    v = view(one)
    c_pub = open(os.path.join(tmp, "c.pub")).read().split("\n")[1].split()[0]
    check([n["curve_key"] for n in sorted(v["nodes"], key=lambda n: n["name"])] == ["", "", c_pub],
          "node `c` registered its CURVE key, and is up through a CURVE link")
    check(v["coordinator"].get("leader") is True and v["leader"]["name"] == "one", "`one` leads: %r" % v["leader"])
    check(wait_for(lambda: get(two + "/health"), 20) is not None and view(two)["coordinator"].get("leader") is False,
          "`two` stands by")
    try:
        urllib.request.urlopen(two + "/cluster", timeout=2)
        unauthorized = None
    except urllib.error.HTTPError as e:
        unauthorized = e.code
    check(unauthorized == 401, "`two` asks for its API key: GET /cluster without it is %s" % unauthorized)
    ns = v["nodes"]
    check(all(n["pages_total"] == 64 for n in ns), "each node's heartbeat reports its 64 KV pages")
    check(len({n["epoch"] for n in ns}) == 3 and len({n["model"]["fingerprint"] for n in ns}) == 1,
          "three epochs, one model")
    metrics = urllib.request.urlopen(one + "/metrics", timeout=2).read().decode()
    check("chorus_cluster_nodes_up 3" in metrics and 'chorus_cluster_node_pages_total{node="a"} 64' in metrics,
          "/metrics carries the cluster series")

    # Programs through the leader: placed across the nodes, the same replies as on one node.

    check(wait_for(lambda: serving(one, ["a", "b", "c"], KEYS.get(one)), 30) is not None,
          "the leader serves on the three nodes")
    got = {}
    first = run_turn(one, 0, got)
    second = run_turn(one, 1, got)
    check(all(st == 200 for st, _ in list(first.values()) + list(second.values())),
          "12 chat completions through the leader: %s" % sorted({st for st, _ in first.values()}))
    check(all(got[p] == want[p][:2] for p in PROGRAMS), "the replies are those of one `chorus serve`")
    check(all(b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for _, b in second.values()),
          "turn 2 of every program finds turn 1 in its block (it stayed on its node)")
    placed = {p["program_id"]: p["node"] for p in get(one + "/programs")["data"]}
    per_node = sorted(list(placed.values()).count(n) for n in ("a", "b", "c"))
    check(per_node == [2, 2, 2], "the programs are spread over the nodes by room: %r" % placed)
    st, body = chat(two, "p0", turn_messages("p0", 0, []))
    check(st == 503 and body["error"]["code"] == "not_leader" and "`one`" in body["error"]["message"],
          "the standby refuses with 503 not_leader, naming the leader: " + body["error"]["message"])
    topo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "topologies", "answer.yaml")
    r = subprocess.run([chorus, "run", topo, "--cluster", two], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CHORUS_API_KEY=KEYS[two]))
    check(r.returncode == 1 and "answered 503" in r.stderr and "stands by" in r.stderr,
          "the standby refuses a topology program too: " + r.stderr.strip()[-120:])

    # Refusals: another model, a name in use.
    r = subprocess.run([chorus, "node", "--model", other_model, "--etcd", etcd_url, "--name", "d", "--endpoint",
                        "tcp://127.0.0.1:*", "--pages", "16", "-t", "1"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "a cluster serves one model" in r.stderr,
          "a node of another model is refused: " + r.stderr.strip()[:160])
    r = subprocess.run([chorus, "node", "--model", model, "--etcd", etcd_url, "--name", "a", "--endpoint",
                        "tcp://127.0.0.1:*", "--pages", "16", "-t", "1", "--lease-ttl", str(TTL)],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "live node named `a`" in r.stderr, "a second node named `a` is refused")

    # kill -9 under a streamed reply: the node is removed (fenced by the heartbeat), the stream
    # goes on on a survivor and is whole.
    chunks, state = [], {}
    th = threading.Thread(target=stream_chat, args=(one, "long", LONG, LONG_TOKENS, chunks, state))
    th.start()
    wait_for(lambda: len(chunks) >= 10 or state.get("done"), 60)
    victim = {p["program_id"]: p["node"] for p in get(one + "/programs")["data"]}.get("long")
    check(victim in nodes and not state.get("done"), "a long reply streams from node %s" % victim)
    t_kill = time.time()
    nodes[victim].send_signal(signal.SIGKILL)
    before_kill = "".join(chunks)
    survivors = sorted(n for n in nodes if n != victim)
    th.join(120)
    text = "".join(chunks)
    usage = state.get("usage", {})
    # Whole: no error, and every token of max_tokens (or up to the end of generation), what was
    # sent before the kill its prefix — the prefix of the run without a kill. After the resume the
    # tokens are those the prefill computes: the same as the run without the kill unless a near-tie
    # flips (a prefill sums in the batch order, a decode in the one-token order, as llama.cpp).
    check(state.get("done") and "error" not in state and text.startswith(before_kill) and
          long_want.startswith(before_kill) and len(before_kill) > 0 and
          (usage.get("completion_tokens") == LONG_TOKENS or state.get("finish") == "stop"),
          "the streamed reply is whole after its node's SIGKILL: %d chunks, %s completion tokens, %.1f s after the "
          "kill, %s" % (len(chunks), usage.get("completion_tokens"), time.time() - t_kill,
                        state.get("error", "no error")))
    same = next((i for i, (x, y) in enumerate(zip(text, long_want)) if x != y), min(len(text), len(long_want)))
    print("info the whole streamed text %s the reply of one `chorus serve` (%d characters in common of %d; %d "
          "sent before the kill)" % ("equals" if text == long_want else "differs from", same, len(long_want),
                                     len(before_kill)), flush=True)
    t = wait_for(lambda: [n["name"] for n in view(one)["nodes"]] == survivors, 30)
    check(t is not None, "the killed node leaves the membership (gone %.1f s after the kill)" % (time.time() - t_kill))
    on_c = [p for p, n in placed.items() if n == victim]
    third = run_turn(one, 2, got)
    check(all(st == 200 for st, _ in third.values()) and all(got[p] == want[p][:3] for p in PROGRAMS),
          "turn 3 of every program, those of the dead node too, has the replies of one node")
    check(all(third[p][1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for p in on_c) and
          all(third[p][1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for p in PROGRAMS if p not in on_c),
          "the programs of the dead node %s started again from their history elsewhere; the others reused theirs"
          % on_c)
    moved = {p["program_id"]: p["node"] for p in get(one + "/programs")["data"]}
    check(all(moved.get(p) in survivors for p in on_c), "they now run on %s: %r" % (survivors, moved))

    # SIGSTOP past the lease, then SIGCONT: fenced, then back as a new member with a larger epoch.
    stopped = survivors[1]
    epoch_b = [n["epoch"] for n in view(one)["nodes"] if n["name"] == stopped][0]
    nodes[stopped].send_signal(signal.SIGSTOP)
    t = wait_for(lambda: [n["name"] for n in view(one)["nodes"]] == [survivors[0]], 30)
    check(t is not None, "a stopped node is removed (in %.1f s)" % (t or -1))
    time.sleep(TTL + 0.5)
    nodes[stopped].send_signal(signal.SIGCONT)
    t = wait_for(lambda: [n["epoch"] for n in view(one)["nodes"] if n["name"] == stopped and n["up"]], 30)
    back = [n["epoch"] for n in view(one)["nodes"] if n["name"] == stopped]
    check(t is not None and back and back[0] > epoch_b,
          "woken up, it joins again as a new member: epoch %d -> %s (in %.1f s)" % (epoch_b, back, t or -1))
    log_one = open(os.path.join(tmp, "coord-one.log")).read()
    # Removed by whichever comes first: the leader's fencing (no heartbeat for --dead-after) or the
    # lease's expiry (TTL).
    removed = ("fenced node `%s`" % stopped) in log_one or ("node `%s` (epoch %d) left" % (stopped, epoch_b)) in log_one
    check(removed and back and ("node `%s` joined (epoch %d" % (stopped, back[0])) in log_one,
          "the leader logged the removal (fenced or lease ended) and the new member")
    log_b = open(os.path.join(tmp, "node-%s.log" % stopped)).read()
    check("lost its lease" in log_b, "the node logged that it lost its lease")

    # The leader dies: the standby takes over.
    [p for p in procs if "one" in p.args][0].send_signal(signal.SIGKILL)
    t = wait_for(lambda: view(two)["coordinator"].get("leader") is True, 30)
    check(t is not None, "the standby leads after the leader's SIGKILL (in %.1f s)" % (t or -1))
    check(wait_for(lambda: up_names(two) == survivors, 30) is not None and view(two)["leader"]["name"] == "two",
          "the new leader sees the nodes: %s" % up_names(two))
    check(wait_for(lambda: serving(two, survivors, KEYS.get(two)), 30) is not None,
          "the new leader serves on %s" % survivors)
    # It rebuilt the program table from the nodes: every program is there, where its block is.
    listed = {p["program_id"]: p["node"] for p in (get(two + "/programs") or {"data": []})["data"]}
    check(sorted(listed) == sorted(PROGRAMS + ["long"]) and set(listed.values()) <= set(survivors),
          "the new leader took the programs over from the nodes: %s" % listed)
    fourth = run_turn(two, 3, got)
    check(all(st == 200 for st, _ in fourth.values()) and all(got[p] == want[p] for p in PROGRAMS),
          "clients retrying with their program_id go on through the new leader, with the replies of one node")
    check(all(fourth[p][1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for p in PROGRAMS),
          "each fourth turn reused its conversation in the block the old leader left (cached tokens: %s)" %
          [fourth[p][1]["usage"]["prompt_tokens_details"]["cached_tokens"] for p in PROGRAMS])
    log_two = open(os.path.join(tmp, "coord-two.log")).read()
    check(log_two.count("took over program") == len(PROGRAMS) + 1,
          "the new leader logged each program it took over (the six and `long`)")
finally:
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                p.wait(timeout=10)
            except Exception:
                p.kill()
    if failures:
        for f in sorted(os.listdir(tmp)):
            if f.endswith(".log") and f != "etcd.log":
                print("---- " + f + "\n" + open(os.path.join(tmp, f)).read()[-3000:])
    shutil.rmtree(tmp, ignore_errors=True)

print("%d passed, %d failed" % (len(passed), len(failures)))
sys.exit(1 if failures else 0)
