#!/usr/bin/env python3
"""A sensor loop across nodes against the same loop in one process (issue 50's benchmark), in one
run. Across nodes: network-namespace hosts (tests/python/netns_hosts.py; root) with etcd and the
coordinator on `hub`, the model node on `na`, an actors-only node on `edge` (role=edge), every
link under CURVE; tests/data/topologies/placed_bridge.yaml runs through the coordinator with its
source and sink on `edge`: a reading is published on the bench's host and read on `edge`, the
status line is published from `edge`. All local: topologies/zmq_bridge.yaml with `chorus run`, the
same readings and sockets on loopback. Prints each side's p50 and p99 (seconds from a reading's
publication to its status line) and their ratio.

    sudo python3 tools/bench/bench_sensor_loop.py [--readings 20] [--chorus build/chorus]
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
from cluster_harness import get, serving, stop_all, wait_for  # noqa: E402
from netns_hosts import require_hosts  # noqa: E402


def loop(py, inp, out, n):
    r = subprocess.run([py, os.path.join(ROOT, "tests", "python", "sensor_loop.py"), inp, out, str(n)],
                       capture_output=True, text=True, timeout=600)
    line = next((l for l in r.stdout.splitlines() if l.startswith("p50 ")), None)
    if r.returncode != 0 or line is None:
        sys.exit("the sensor loop failed: " + r.stdout[-400:] + r.stderr[-400:])
    _, p50, _, p99 = line.split()
    return float(p50), float(p99)


def main():
    home = os.environ.get("CHORUS_HOME", os.path.expanduser("~/.cache/chorus"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", default=os.path.join(ROOT, "build", "chorus"))
    ap.add_argument("--model", default=os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--python", default=os.path.join(home, "venv-tests", "bin", "python"), help="with pyzmq")
    ap.add_argument("--readings", type=int, default=20)
    args = ap.parse_args()
    chorus = args.chorus

    # All local, first: one process, loopback sockets.
    local = subprocess.Popen([chorus, "run", os.path.join(ROOT, "topologies", "zmq_bridge.yaml"), "--model", args.model,
                              "--set", "in=tcp://127.0.0.1:5901", "--set", "out=tcp://127.0.0.1:5902"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        here = loop(args.python, "tcp://127.0.0.1:5901", "tcp://127.0.0.1:5902", args.readings)
    finally:
        stop_all([local])

    hosts = require_hosts(["hub", "na", "edge"])
    tmp = tempfile.mkdtemp(prefix="chorus-sensor-loop-")
    procs = []
    try:
        def start(host, argv, log):
            p = subprocess.Popen(hosts.run_args(host, argv), stdout=open(os.path.join(tmp, log), "w"),
                                 stderr=subprocess.STDOUT)
            procs.append(p)
            return p

        hub = hosts.address["hub"]
        etcd = "http://%s:2379" % hub
        procs.append(subprocess.Popen(hosts.etcd_args("hub", os.path.join(tmp, "etcd"), os.path.join(tmp, "etcd.log")),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        if wait_for(lambda: get(etcd + "/health"), 20) is None:
            sys.exit("etcd did not start")
        for who in ("hub", "na", "edge"):
            subprocess.run([chorus, "keygen", os.path.join(tmp, who)], check=True, capture_output=True)
        common = ["--etcd", etcd, "--lease-ttl", "2"]
        for name, extra in (("na", ["--model", args.model]), ("edge", ["--no-model", "--label", "role=edge"])):
            start(name, [chorus, "node", *common, "--name", name, "--endpoint", "tcp://%s:5555" % hosts.address[name],
                         "--curve-key", os.path.join(tmp, name + ".key"), "--allow-keys", os.path.join(tmp, "hub.pub"),
                         *extra], "node-%s.log" % name)
        url = "http://%s:8100" % hub
        start("hub", [chorus, "coordinator", *common, "--name", "hub", "--model", args.model, "--host", hub,
                      "--port", "8100", "--curve-key", os.path.join(tmp, "hub.key")], "coord.log")
        if wait_for(lambda: serving(url, ["na"]), 90) is None:
            sys.exit("the coordinator does not serve on na")
        edge_out = "tcp://%s:5902" % hosts.address["edge"]
        placed = subprocess.Popen([chorus, "run", "--cluster", url, os.path.join(ROOT, "tests", "data", "topologies",
                                                                              "placed_bridge.yaml"),
                                   "--set", "in=tcp://%s:5901" % hosts.bridge_address, "--set", "out=" + edge_out,
                                   "--set", "budget.seconds=600"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(placed)
        across = loop(args.python, "tcp://%s:5901" % hosts.bridge_address, edge_out, args.readings)
    finally:
        stop_all(procs)
        hosts.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| loop | readings | p50 s | p99 s |")
    print("|---|---|---|---|")
    print("| all local (one process, loopback) | %d | %.4f | %.4f |" % (args.readings, here[0], here[1]))
    print("| across nodes (source and sink on `edge`, CURVE) | %d | %.4f | %.4f |" % (args.readings, across[0],
                                                                                    across[1]))
    print("across / local: p50 %.2fx, p99 %.2fx" % (across[0] / here[0], across[1] / here[1]))


if __name__ == "__main__":
    main()
