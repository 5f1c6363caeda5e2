#!/usr/bin/env python3
"""A sensor loop against a running zmq_bridge-like program: binds a PUB socket at IN and publishes
readings (topic `sensor`), subscribes to OUT (topic `status`), and times each reading's status
line. The first reading is published again until one line comes back (a SUB socket drops what is
published before it is connected); each later one waits for its line. Prints `reply SECONDS TEXT`
per reading, then `p50 SECONDS p99 SECONDS`; exit 1 when a reading gets no line within 30 s.

    sensor_loop.py IN OUT N        (needs pyzmq: the test venv's python)
"""
import sys
import time

import zmq

inp, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.bind(inp)
sub = ctx.socket(zmq.SUB)
sub.connect(out)
sub.setsockopt(zmq.SUBSCRIBE, b"status")


def reading(i):
    return ("t=%d.0s battery=%d%% obstacle=%.1fm speed=0.5m/s" % (i, 90 - i, 3.0 - 0.2 * i)).encode()


def drain():
    while sub.poll(0):
        sub.recv_multipart()


latencies = []
for attempt in range(60):  # the first reading, until the loop is connected end to end
    pub.send_multipart([b"sensor", reading(0)])
    if sub.poll(1000):
        sub.recv_multipart()
        break
else:
    print("no status line for the first reading within 60 s")
    sys.exit(1)
time.sleep(1)
drain()
for i in range(1, n + 1):
    t0 = time.time()
    pub.send_multipart([b"sensor", reading(i)])
    if not sub.poll(30000):
        print("no status line for reading %d within 30 s" % i)
        sys.exit(1)
    text = sub.recv_multipart()[-1].decode(errors="replace").strip()
    latencies.append(time.time() - t0)
    print("reply %.4f %s" % (latencies[-1], text), flush=True)
    time.sleep(0.2)
    drain()
s = sorted(latencies)
print("p50 %.4f p99 %.4f" % (s[len(s) // 2], s[min(len(s) - 1, int(0.99 * len(s)))]))
