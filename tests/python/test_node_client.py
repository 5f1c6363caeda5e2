#!/usr/bin/env python3
"""End to end: start `chorus node`, talk to it with the Python client (pyzmq + flatbuffers code
generated from schemas/), and check that bad frames get error replies while it keeps serving.

    test_node_client.py CHORUS_BINARY MODEL
(run by ctest with PYTHONPATH=build/python:clients/python)
"""
import subprocess
import sys
import time

import zmq
from chorus_client import ChorusClient, ChorusError, decode, envelope
from chorus.wire import CreateBlock, Payload

chorus, model = sys.argv[1], sys.argv[2]
node = subprocess.Popen([chorus, "node", "--model", model, "--endpoint", "tcp://127.0.0.1:*",
                         "--max-frame-bytes", "100000", "--pages", "64"], stdout=subprocess.PIPE, text=True)
failures = []
passed = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    (passed if cond else failures).append(what)


try:
    line = node.stdout.readline()
    endpoint = line.rsplit(" ", 1)[-1].strip()
    events_endpoint = line.split("events on ", 1)[1].split(",", 1)[0].strip()
    check(endpoint.startswith("tcp://127.0.0.1:"), "node announces its endpoint: " + line.strip())
    c = ChorusClient(endpoint, timeout_ms=30000)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVTIMEO, 30000)
    sub.connect(events_endpoint)

    prompt = c.create_block("prompt")
    done = c.wait(c.forward(prompt, tokens=[5, 6, 7, 8, 9]))
    check(done["reason"] == "completed", "forward completes")
    out = c.create_block("out")
    sub.setsockopt_string(zmq.SUBSCRIBE, "block:%d" % out)
    time.sleep(0.3)  # let the subscription reach the publisher
    events = list(c.events(c.generate(out, view=[prompt], prefill=[3], max_tokens=5)))
    tokens = [e for e in events if e["kind"] == "TokenEvent"]
    check(len(tokens) == 5 and events[-1]["reason"] == "max_tokens", "generate streams 5 tokens, then finishes")
    published = []
    while not published or published[-1]["kind"] != "RequestFinished":
        topic, frame = sub.recv_multipart()
        published.append(decode(frame))
    check(topic == b"block:%d" % out and len([e for e in published if e["kind"] == "TokenEvent"]) == 5,
          "a subscriber of the block sees the same 5 token events on the PUB socket")
    result = [e for e in c.events(c.probe([prompt, out], "?", [[1], [2, 3]])) if e["kind"] == "ProbeResult"]
    check(len(result) == 1 and len(result[0]["probabilities"]) == 2, "probe answers one probability per candidate")

    merged = c.merge_blocks(prompt, out, "both")
    check(merged["tokens"] == 11 and merged["cached"] == 11 and merged["name"] == "both",
          "merge answers with a new block of 5 + 6 tokens: %r" % merged)
    head = c.fork_block(merged["block"], 7, "head")
    check(head["tokens"] == 7 and head["block"] not in (prompt, out, merged["block"]), "fork answers with 7 tokens")
    snap = c.snapshot_view([prompt, out])
    check([(x["block"], x["name"], x["tokens"], x["cached"]) for x in snap] == [(prompt, "prompt", 5, 5), (out, "out", 6, 6)],
          "a view snapshot lists each block in order with its lengths: %r" % snap)
    check(c.clear_block(out)["tokens"] == 0, "clear empties the block")
    try:
        c.fork_block(merged["block"], 99)
        check(False, "a fork longer than the block is refused")
    except ChorusError as e:
        check("99 tokens" in str(e), "a fork longer than the block is refused: " + str(e))
    c.free_block(head["block"])

    good = envelope(Payload.Payload.CreateBlock, lambda b: (CreateBlock.Start(b), CreateBlock.End(b))[1], 9)
    for name, frame in [("garbage", b"\x01\x02\x03\x04\x05\x06\x07\x08\x09"),
                        ("truncated", good[:len(good) // 2]),
                        ("wrong identifier", good[:4] + b"XXXX" + good[8:]),
                        ("oversized", b"\0" * 100001)]:
        reply = c.raw(frame)
        check(reply["kind"] == "Error", "%s frame gets an error reply (%s)" % (name, reply.get("message", "")))
    # Wrong version: build an envelope with version 9.
    import flatbuffers
    from chorus.wire import Envelope
    b = flatbuffers.Builder(64)
    CreateBlock.Start(b)
    p = CreateBlock.End(b)
    Envelope.Start(b)
    Envelope.AddVersion(b, 9)
    Envelope.AddPayloadType(b, Payload.Payload.CreateBlock)
    Envelope.AddPayload(b, p)
    b.Finish(Envelope.End(b), file_identifier=b"CHR1")
    reply = c.raw(bytes(b.Output()))
    check(reply["kind"] == "Error" and "version" in reply["message"], "wrong-version frame: " + reply.get("message", ""))
    try:
        c.forward(12345, tokens=[1])
        check(False, "forward into a missing block is refused")
    except ChorusError as e:
        check("does not exist" in str(e) and e.code == "not_found", "forward into a missing block is refused: %s (%s)" % (e, e.code))
    try:
        c.generate(c.create_block("too long"), prefill=[1, 2, 3], max_tokens=2000)  # 64 pages hold 1024
        check(False, "a generate that may write more than the KV pool is refused")
    except ChorusError as e:
        check(e.code == "out_of_memory" and "the pool has" in str(e),
              "a generate that may write more than the KV pool is refused as out_of_memory: %s (%s)" % (e, e.code))
    check(c.create_block("after the bad frames") >= 0, "the node keeps serving")
    c.close()
    sub.close()
finally:
    node.terminate()
    try:
        node.wait(timeout=10)
    except subprocess.TimeoutExpired:
        node.kill()

print("%d passed, %d failed" % (len(passed), len(failures)))
sys.exit(1 if failures else 0)
