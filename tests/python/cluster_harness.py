"""What the cluster tests share (test_cluster.py, test_cluster_queue.py, test_cluster_topology.py): checks that
are counted, processes that are stopped at the end, free ports, polling, and a real etcd on
loopback with a temporary data dir."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "tools", "bench"))
from common import free_port  # noqa: E402  (the benchmark scripts' own)


class Harness:
    def __init__(self, tmp):
        self.tmp = tmp
        self.failures, self.passed, self.procs = [], [], []

    def check(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        (self.passed if cond else self.failures).append(what)

    def start(self, args, log):
        p = subprocess.Popen(args, stdout=open(os.path.join(self.tmp, log), "w"), stderr=subprocess.STDOUT)  # log: in tmp
        self.procs.append(p)
        return p

    def etcd(self):
        """A real etcd on free loopback ports; returns its client URL once it answers."""
        cport, pport = free_port(), free_port()
        url, peer = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
        self.start(["etcd", "--name=t", "--data-dir=" + os.path.join(self.tmp, "etcd"), "--listen-client-urls=" + url,
                    "--advertise-client-urls=" + url, "--listen-peer-urls=" + peer,
                    "--initial-advertise-peer-urls=" + peer, "--initial-cluster=t=" + peer, "--logger=zap",
                    "--log-outputs=" + os.path.join(self.tmp, "etcd.log")], "etcd.out")
        self.check(wait_for(lambda: get(url + "/health"), 20) is not None, "etcd answers")
        return url

    def finish(self):
        """Stops every process (the logs printed when a check failed), removes tmp, exits."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.terminate()
                    p.wait(timeout=10)
                except Exception:
                    p.kill()
        if self.failures:
            for f in sorted(os.listdir(self.tmp)):
                if f.endswith(".log") and f != "etcd.log":
                    print("---- " + f + "\n" + open(os.path.join(self.tmp, f)).read()[-3000:])
        shutil.rmtree(self.tmp, ignore_errors=True)
        print("%d passed, %d failed" % (len(self.passed), len(self.failures)))
        sys.exit(1 if self.failures else 0)


def turn_messages(program, k, replies):
    """Turn k of a chat program: its history (the replies so far) and the k-th question."""
    msgs = []
    for j in range(k + 1):
        msgs.append({"role": "user", "content": "Question %d of %s: name a colour." % (j, program)})
        if j < k:
            msgs.append({"role": "assistant", "content": replies[j]})
    return msgs


def stop_all(procs):
    """Ends every process still running (SIGTERM, then SIGKILL after 10 s)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def print_logs(tmp):
    """The tail of every *.log in tmp but etcd's (after a failed check)."""
    for f in sorted(os.listdir(tmp)):
        if f.endswith(".log") and f != "etcd.log":
            print("---- " + f + "\n" + open(os.path.join(tmp, f)).read()[-3000:])


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.loads(r.read())
    except Exception:
        return None


def serving(url, nodes, key=None):
    """Whether the coordinator at url serves on every one of nodes: its /metrics carry a series of each."""
    req = urllib.request.Request(url + "/metrics")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        text = urllib.request.urlopen(req, timeout=2).read().decode()
    except Exception:
        return False
    return all('chorus_requests_total{node="%s"}' % n in text for n in nodes)


def wait_for(cond, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        if cond():
            return time.time() - t0
        time.sleep(0.1)
    return None
