#!/usr/bin/env python3
"""What a message between a program's actors costs in a process, to an actors-only node on
loopback, and to one on another (network-namespace) host under CURVE (issue 50's benchmark;
docs/cluster.md, "Placing actors"), in one run: build/chorus_actor_bench (tools/bench/
actor_bench.cpp) against each. The namespace host needs root; without it, that row is left out.

    python3 tools/bench/bench_actor_messages.py [--n 2000]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from cluster_harness import stop_all  # noqa: E402
from netns_hosts import hosts_or_reason  # noqa: E402


def rows(out):
    return [l for l in out.splitlines() if l.startswith("| ") and "exchange" not in l]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    chorus, bench = os.path.join(args.build, "chorus"), os.path.join(args.build, "chorus_actor_bench")
    tmp = tempfile.mkdtemp(prefix="chorus-actor-bench-")
    env = dict(os.environ, CHORUS_SANDBOX="plain", CHORUS_SANDBOX_DIR=tmp)
    procs, out = [], []
    hosts = None
    try:
        node = subprocess.Popen([chorus, "node", "--no-model", "--endpoint", "tcp://127.0.0.1:5771", "--unsafe-tools"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        procs.append(node)
        time.sleep(1)
        r = subprocess.run([bench, str(args.n), "tcp://127.0.0.1:5771"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(r.stderr)
        out += [l.replace("to tcp://127.0.0.1:5771", "to an actors-only node on loopback") for l in rows(r.stdout)]
        stop_all(procs)
        hosts, why = hosts_or_reason(["far"])
        if hosts is None:
            print("(no namespace host: %s)" % why)
        else:
            for who in ("far", "bench"):
                subprocess.run([chorus, "keygen", os.path.join(tmp, who)], check=True, capture_output=True)
            endpoint = "tcp://%s:5771" % hosts.address["far"]
            procs.append(subprocess.Popen(hosts.run_args("far", [chorus, "node", "--no-model", "--endpoint", endpoint,
                                                                  "--unsafe-tools", "--curve-key",
                                                                  os.path.join(tmp, "far.key"), "--allow-keys",
                                                                  os.path.join(tmp, "bench.pub")]),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
            time.sleep(1)
            far_pub = open(os.path.join(tmp, "far.pub")).read().split("\n")[1].split()[0]
            r = subprocess.run([bench, str(args.n), endpoint, far_pub, os.path.join(tmp, "bench.key")],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                sys.exit(r.stderr)
            out += [l.replace("to " + endpoint, "to an actors-only node on another host, CURVE")
                    for l in rows(r.stdout) if "across" in l]
    finally:
        stop_all(procs)
        if hosts is not None:
            hosts.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| exchange | round trips | p50 us | p99 us | pipelined per s |")
    print("|---|---|---|---|---|")
    for l in out:
        print(l)


if __name__ == "__main__":
    main()
