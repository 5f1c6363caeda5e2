#!/usr/bin/env python3
"""Sticky routing against the coordinator's global waiting queue, on two live nodes (issue 21).

ThunderAgent's cross-node imbalance (§3.2, §4.3.2) on this machine: a real etcd, two `chorus node`
processes (one thread each, --pages KV pages each) and one `chorus coordinator`. N agent programs
loop reason (a chat completion with its program_id) / act (a sandboxed tool that sleeps a
heavy-tailed time and prints words that join the context) for a number of steps that differs per
program (1 .. 2 * --steps - 1), with tool outputs that differ per program (--tool-words times
2^u, u uniform in [-spread, spread]): contexts grow at different rates, so the nodes drift
apart. The same workload (same seeds) runs twice:

  sticky   `--migrate-after 0`: a program's requests always go to the node it was placed on
           (a KV-aware router's stickiness); a turn that finds no room there waits there
  global   `--migrate-after S`: a turn that waited S seconds for room on its node moves to a node
           with room (released there; its conversation prefilled on the other, or its KV sent
           there when the node kept it — `--host-pages` — and the cost model finds that cheaper)

New programs go to the node with the most room under both. The coordinator runs with
--dead-after 15: a node of one thread busy with long prefills on two shared cores can miss the
default 2 s of heartbeats. Reported: steps/min (whole run and
middle half), recomputed tokens (both nodes, from /metrics), moves, p50/p99 step latency, and the
nodes' imbalance: |pages used on a - on b| / pages, sampled every 0.25 s (peak and mean).

  PY=~/.cache/chorus/venv-tests/bin/python
  $PY tools/bench/bench_cluster.py --programs 16 --steps 4 --pages 200 --json /tmp/cluster.json
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_programs import tool_run  # noqa: E402
from common import free_port, stop  # noqa: E402



def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except Exception:
        return None


def wait_for(cond, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        if cond():
            return True
        time.sleep(0.1)
    return False


def run_routing(args, routing, tmp):
    procs = []

    def start(cmd, log):
        procs.append(subprocess.Popen(cmd, stdout=open(os.path.join(tmp, log), "w"), stderr=subprocess.STDOUT))

    try:
        cport, pport = free_port(), free_port()
        etcd = "http://127.0.0.1:%d" % cport
        peer = "http://127.0.0.1:%d" % pport
        start(["etcd", "--name=b", "--data-dir=" + os.path.join(tmp, "etcd-" + routing), "--listen-client-urls=" + etcd,
               "--advertise-client-urls=" + etcd, "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
               "--initial-cluster=b=" + peer, "--logger=zap", "--log-outputs=" + os.path.join(tmp, "etcd.log")],
              "etcd.out")
        if not wait_for(lambda: get(etcd + "/health"), 20):
            sys.exit("etcd did not start")
        for name in ("a", "b"):
            start([args.chorus, "node", "--model", args.model, "--etcd", etcd, "--name", name, "--endpoint",
                   "tcp://127.0.0.1:*", "--pages", str(args.pages), "-t", "1", "--host-pages",
                   str(args.host_pages)],
                  "node-%s-%s.log" % (name, routing))
        port = free_port()
        base = "http://127.0.0.1:%d" % port
        start([args.chorus, "--log-level", "info", "coordinator", "--etcd", etcd, "--port", str(port), "--model",
               args.model, "--ctx", "8192", "--check-period", str(args.check_period), "--dead-after", "15", "--migrate-after",
               "0" if routing == "sticky" else str(args.migrate_after)], "coord-%s.log" % routing)

        def serving():
            text = get(base + "/metrics") or ""
            return all('chorus_requests_total{node="%s"}' % n in text for n in ("a", "b"))

        if not wait_for(serving, 90):
            sys.exit("the coordinator does not serve on both nodes (logs in %s)" % tmp)
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=600, max_retries=0)
        model = client.models.list().data[0].id

        imbalance, sampling_done = [], threading.Event()

        def sample():
            while not sampling_done.is_set():
                v = json.loads(get(base + "/cluster") or '{"nodes": []}')
                used = [n["pages_used"] for n in v["nodes"]]
                if len(used) == 2:
                    imbalance.append(abs(used[0] - used[1]) / args.pages)
                sampling_done.wait(0.25)

        latencies, lock, errors, step_times = [], threading.Lock(), [], []

        def program(i):
            rng = random.Random(1000 + i)
            steps = rng.randint(1, max(1, 2 * args.steps - 1))
            words = max(10, int(args.tool_words * 2 ** rng.uniform(-args.spread, args.spread)))
            messages = [{"role": "system", "content": "You are an agent. Think about the tool output, then decide."},
                        {"role": "user", "content": "Task %d: check the build and report what fails." % i}]
            for k in range(steps):
                t0 = time.time()
                try:
                    r = client.chat.completions.create(model=model, messages=messages, max_tokens=args.reason_tokens,
                                                       temperature=0.8, seed=i * 100 + k,
                                                       extra_body={"program_id": "bench-%d" % i})
                except Exception as e:  # noqa: BLE001 - reported, the benchmark goes on
                    with lock:
                        errors.append(str(e))
                    return
                with lock:
                    latencies.append(time.time() - t0)
                    step_times.append(time.time())
                messages.append({"role": "assistant", "content": r.choices[0].message.content})
                if k + 1 < steps:
                    out, _ = tool_run(rng, words)
                    messages.append({"role": "user", "content": "Tool output:\n" + out})

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.time()
        threads = [threading.Thread(target=program, args=(i,)) for i in range(args.programs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        sampling_done.set()
        sampler.join()
        metrics = get(base + "/metrics") or ""

        def total(name):
            return sum(float(v) for v in re.findall(r"^%s(?:\{[^}]*\})? (\S+)" % name, metrics, re.M))

        step_times.sort()
        n = len(step_times)
        middle = 60.0 * (n // 2) / max(step_times[3 * n // 4] - step_times[n // 4], 1e-9) if n >= 8 else float("nan")
        latencies.sort()
        pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
        return {"routing": routing, "steps": n, "wall_s": wall, "steps_per_min": 60.0 * n / wall,
                "middle_steps_per_min": middle, "recomputed_tokens": total("chorus_recomputed_tokens_total"),
                "moves": total("chorus_cluster_program_moves_total"),
                "kv_moves": total("chorus_cluster_kv_moves_total"), "p50_step_s": pct(0.5), "p99_step_s": pct(0.99),
                "peak_imbalance": max(imbalance) if imbalance else float("nan"),
                "mean_imbalance": sum(imbalance) / len(imbalance) if imbalance else float("nan"),
                "n_errors": len(errors), "errors": errors[:3]}
    finally:
        stop(procs, timeout=20)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default="build/chorus")
    ap.add_argument("--model", default=None, help="GGUF (default: the default model)")
    ap.add_argument("--programs", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="a program runs 1 .. 2 * steps - 1 steps")
    ap.add_argument("--reason-tokens", type=int, default=48)
    ap.add_argument("--tool-words", type=int, default=120)
    ap.add_argument("--spread", type=float, default=2.0, help="log2 of the widest factor on a program's tool words")
    ap.add_argument("--pages", type=int, default=200, help="KV pages of 16 tokens per node")
    ap.add_argument("--host-pages", type=int, default=0,
                    help="host pages each node offers: paused programs keep their KV, and a move may carry it")
    ap.add_argument("--check-period", type=float, default=1.0)
    ap.add_argument("--migrate-after", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.model is None:
        args.model = os.path.expanduser("~/.cache/chorus/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not shutil.which("etcd"):
        sys.exit("etcd is not installed (Debian etcd-server)")
    tmp = tempfile.mkdtemp(prefix="chorus-bench-cluster-")
    results = []
    for routing in ("sticky", "global"):
        r = run_routing(args, routing, tmp)
        results.append(r)
        print(json.dumps(r), flush=True)
    st = results[0]
    print("\n%-7s %10s %8s %11s %12s %6s %8s %8s %8s %10s %10s %7s" % (
        "routing", "steps/min", "vs sticky", "middle/min", "recomputed", "moves", "with KV", "p50 s", "p99 s",
        "peak imbal", "mean imbal", "errors"))
    for r in results:
        print("%-7s %10.1f %8.2fx %11.1f %12d %6d %8d %8.2f %8.2f %10.2f %10.2f %7d" % (
            r["routing"], r["steps_per_min"], r["steps_per_min"] / st["steps_per_min"], r["middle_steps_per_min"],
            r["recomputed_tokens"], r["moves"], r["kv_moves"], r["p50_step_s"], r["p99_step_s"], r["peak_imbalance"],
            r["mean_imbalance"], r["n_errors"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
