#!/usr/bin/env python3
"""End to end: a node port under ZeroMQ CURVE (docs/security.md). Keys from `chorus keygen`; an
allowed client (DEALER and SUB) is served, a client with an unknown key and a plain client are
refused and logged, and the node keeps serving the allowed one. Also the refusals at start:
plaintext on a non-loopback endpoint, half a CURVE configuration, a key file others may read.

    test_node_curve.py CHORUS_BINARY MODEL
(run by ctest with PYTHONPATH=build/python:clients/python)
"""
import os
import stat
import subprocess
import sys
import tempfile
import time

import zmq
from chorus_client import ChorusClient, curve_client, decode, read_curve_keys, read_curve_public

chorus, model = sys.argv[1], sys.argv[2]
failures, passed = [], []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    (passed if cond else failures).append(what)


def refused_at_start(args, expect, what):
    r = subprocess.run([chorus, "node", "--model", model, "--pages", "16"] + args, capture_output=True, text=True,
                       timeout=120)
    check(r.returncode != 0 and expect in r.stderr, "%s: %s" % (what, r.stderr.strip()))


def times_out(client):
    try:
        client.create_block("x")
        return False
    except zmq.Again:
        return True


check(zmq.has("curve"), "pyzmq's libzmq has CURVE")
work = tempfile.mkdtemp(prefix="chorus-curve-")
for name in ("node", "client", "stranger"):
    r = subprocess.run([chorus, "keygen", os.path.join(work, name)], capture_output=True, text=True)
    check(r.returncode == 0, "keygen %s: %s" % (name, r.stdout.strip()))
k = lambda name, ext: os.path.join(work, name + ext)
check(stat.S_IMODE(os.stat(k("node", ".key")).st_mode) == 0o600, "a .key file is written with mode 0600")
r = subprocess.run([chorus, "keygen", os.path.join(work, "node")], capture_output=True, text=True)
check(r.returncode != 0 and "--force" in r.stderr, "keygen does not replace a key pair: " + r.stderr.strip())
node_public, _ = read_curve_keys(k("node", ".key"))
check(read_curve_public(k("node", ".pub")) == node_public, "the .pub file holds the .key file's public key")

refused_at_start(["--endpoint", "tcp://0.0.0.0:*", "--events-endpoint", ""], "plaintext",
                 "plaintext on every interface is refused")
refused_at_start(["--endpoint", "tcp://127.0.0.1:*", "--events-endpoint", "tcp://0.0.0.0:*"], "plaintext",
                 "plaintext events on every interface are refused")
refused_at_start(["--curve-key", k("node", ".key")], "--allow-keys", "a key pair without allowed clients is refused")
os.chmod(k("client", ".key"), 0o644)
refused_at_start(["--curve-key", k("client", ".key"), "--allow-keys", k("client", ".pub")], "chmod 600",
                 "a key file others may read is refused")
os.chmod(k("client", ".key"), 0o600)
refused_at_start(["--curve-key", k("node", ".key"), "--allow-keys", k("node", ".key")], "secret key file",
                 "a secret key file as an allowlist is refused")

node = subprocess.Popen([chorus, "node", "--model", model, "--endpoint", "tcp://127.0.0.1:*", "--pages", "64",
                         "--curve-key", k("node", ".key"), "--allow-keys", k("client", ".pub")],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    line = node.stdout.readline()
    endpoint = line.rsplit(" ", 1)[-1].strip()
    events_endpoint = line.split("events on ", 1)[1].split(",", 1)[0].strip()
    banner = node.stdout.readline()
    check("CURVE, key " + node_public in banner and "1 client key" in banner, "the node announces CURVE: " +
          banner.strip())

    c = ChorusClient(endpoint, timeout_ms=30000, server_key=k("node", ".pub"), client_keys=k("client", ".key"))
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVTIMEO, 30000)
    curve_client(sub, k("node", ".pub"), k("client", ".key"))
    sub.connect(events_endpoint)
    prompt = c.create_block("prompt")
    check(c.wait(c.forward(prompt, tokens=[5, 6, 7]))["reason"] == "completed", "an allowed client is served")
    out = c.create_block("out")
    sub.setsockopt_string(zmq.SUBSCRIBE, "block:%d" % out)
    time.sleep(0.3)  # the subscription reaches the publisher
    events = list(c.events(c.generate(out, view=[prompt], prefill=[3], max_tokens=4)))
    published = []
    while not published or published[-1]["kind"] != "RequestFinished":
        published.append(decode(sub.recv_multipart()[1]))
    tokens = [e["token"] for e in events if e["kind"] == "TokenEvent"]
    check(events[-1]["reason"] == "max_tokens" and len(tokens) >= 4 and
          [e["token"] for e in published if e["kind"] == "TokenEvent"] == tokens,
          "it streams its tokens, and an allowed subscriber sees the same ones on the CURVE PUB socket")

    stranger = ChorusClient(endpoint, timeout_ms=2000, server_key=k("node", ".pub"),
                            client_keys=k("stranger", ".key"))
    check(times_out(stranger), "a CURVE client with a key the node does not allow gets no answer")
    plain = ChorusClient(endpoint, timeout_ms=2000)
    check(times_out(plain), "a plain (non-CURVE) client gets no answer")
    wrong_server = ChorusClient(endpoint, timeout_ms=2000, server_key=k("stranger", ".pub"),
                                client_keys=k("client", ".key"))
    check(times_out(wrong_server), "an allowed client that expects another server key gets no answer")
    spy = zmq.Context.instance().socket(zmq.SUB)
    spy.setsockopt(zmq.LINGER, 0)
    spy.setsockopt(zmq.RCVTIMEO, 1500)
    spy.setsockopt_string(zmq.SUBSCRIBE, "")
    spy.connect(events_endpoint)
    time.sleep(0.3)
    list(c.events(c.generate(out, view=[prompt], max_tokens=2)))
    try:
        spy.recv_multipart()
        check(False, "a plain subscriber hears nothing of the events")
    except zmq.Again:
        check(True, "a plain subscriber hears nothing of the events")
    for s in (stranger, plain, wrong_server):
        s.close()
    spy.close()
    check(c.snapshot_view([prompt])[0]["tokens"] == 3, "the node goes on serving the allowed client")
    sub.close()
    c.close()
finally:
    node.terminate()
    try:
        out, err = node.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        node.kill()
        out, err = node.communicate()
    err = out + err  # spdlog's lines are on stdout
stranger_public, _ = read_curve_keys(k("stranger", ".key"))
check("refused a connection from 127.0.0.1 with CURVE key %s: not an allowed key" % stranger_public in err,
      "the node logs the unknown key's refusal")
check("failed the handshake" in err, "the node logs the plain client's failed handshake")
check(err.count("with CURVE key " + stranger_public) <= 2, "refusals of one peer are rate-limited in the log")

print("%d passed, %d failed" % (len(passed), len(failures)))
sys.exit(1 if failures else 0)
