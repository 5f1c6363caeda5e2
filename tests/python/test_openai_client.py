"""The official `openai` Python client against `chorus serve`: non-streaming and streaming
completions, usage counts, a multi-turn program that reuses its block, two programs at once,
/programs, /metrics, releasing, the errors a client gets for bad requests, and API keys.

  python tests/python/test_openai_client.py build/chorus MODEL.gguf
"""
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

import serve_support
from serve_support import check, failures, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]
def http(method, url, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def start_server(*options):
    return serve_support.start_server(CHORUS, MODEL, *options)


server, base = start_server("--pages", "512", "--check-period", "0.5")
try:
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")

    models = client.models.list()
    model = models.data[0].id
    check(len(models.data) == 1 and model, "GET /v1/models lists the model (%s)" % model)
    check(client.models.retrieve(model).id == model, "GET /v1/models/{id} gives the served model")
    try:
        client.models.retrieve("no-such-model")
        check(False, "an unknown model id is a 404")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.code == "model_not_found", "an unknown model id is a 404, model_not_found")

    # Fields that do not change the reply are accepted, and the reply is the one without them.
    ask = dict(model=model, messages=[{"role": "user", "content": "Name a fruit."}], max_tokens=8, temperature=0)
    plain = client.chat.completions.create(**ask)
    extra = client.chat.completions.create(**ask, store=True, metadata={"run": "7"}, service_tier="auto",
                                           extra_body={"prompt_cache_key": "fruit", "safety_identifier": "u-9",
                                                       "verbosity": "medium"})
    check(extra.choices[0].message.content == plain.choices[0].message.content,
          "store, metadata, service_tier, prompt_cache_key, safety_identifier, verbosity=medium: accepted, "
          "the same reply")

    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Name a color."}],
                                       max_tokens=12, temperature=0)
    check(r.object == "chat.completion" and r.choices[0].message.role == "assistant", "a completion comes back")
    check(isinstance(r.choices[0].message.content, str) and len(r.choices[0].message.content) > 0, "with content")
    check(r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0 and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage counts add up")
    check(r.choices[0].finish_reason in ("stop", "length"), "finish_reason " + str(r.choices[0].finish_reason))

    pieces = []
    usage = None
    for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to five."}],
                                                max_tokens=16, temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage:
            usage = chunk.usage
    check(len(pieces) > 1, "streaming sends the text in pieces (%d)" % len(pieces))
    check(usage is not None and usage.completion_tokens > 0, "the last stream chunk carries usage")
    same = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to five."}],
                                          max_tokens=16, temperature=0)
    check("".join(pieces) == same.choices[0].message.content, "streamed text = the same request not streamed")

    # A multi-turn program: the second request repeats the history and reuses the block.
    history = [{"role": "user", "content": "What is the capital of France?"}]
    a1 = client.chat.completions.create(model=model, messages=history, max_tokens=24, temperature=0,
                                        extra_body={"program_id": "conv-1"})
    history += [{"role": "assistant", "content": a1.choices[0].message.content},
                {"role": "user", "content": "And of Italy?"}]
    a2 = client.chat.completions.create(model=model, messages=history, max_tokens=24, temperature=0,
                                        extra_body={"program_id": "conv-1"})
    cached = a2.usage.prompt_tokens_details.cached_tokens
    check(cached == a1.usage.prompt_tokens + a1.usage.completion_tokens,
          "turn 2 reuses turn 1 from the program's block (%d cached tokens, %d prompt)" % (cached, a2.usage.prompt_tokens))

    # A changed history (the client edits turn 2's question): the block is kept up to where the
    # histories part, and the reply is the one a fresh program gives the same history.
    edited = history[:-1] + [{"role": "user", "content": "And of Spain?"}]
    a3 = client.chat.completions.create(model=model, messages=edited, max_tokens=24, temperature=0,
                                        extra_body={"program_id": "conv-1"})
    fresh = client.chat.completions.create(model=model, messages=edited, max_tokens=24, temperature=0,
                                           extra_body={"program_id": "conv-1-fresh"})
    kept = a3.usage.prompt_tokens_details.cached_tokens
    check(a1.usage.prompt_tokens + a1.usage.completion_tokens <= kept < a2.usage.prompt_tokens and
          fresh.usage.prompt_tokens_details.cached_tokens == 0,
          "an edited last question: the block is kept up to it (%d cached of %d prompt tokens)" %
          (kept, a3.usage.prompt_tokens))
    check(a3.choices[0].message.content == fresh.choices[0].message.content,
          "and the reply is a fresh program's: %r" % a3.choices[0].message.content)

    # Two programs at once.
    results = {}

    def converse(pid):
        results[pid] = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello " + pid}],
                                                      max_tokens=16, temperature=0, extra_body={"program_id": pid})

    threads = [threading.Thread(target=converse, args=(p,)) for p in ("conc-a", "conc-b")]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(results[p].choices[0].message.content is not None for p in ("conc-a", "conc-b")),
          "two programs served at once (%.2f s)" % (time.time() - t0))

    # Turns of one program sent at once wait for each other in order (one writer per block): none
    # is refused while 8 wait; a ninth waiting is a 429.
    order, codes = [], {}

    def turn(i):
        try:
            say = "Count from 1 to 200." if i == 0 else "Say %d." % i  # the first is long
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": say}],
                                           max_tokens=160 if i == 0 else 12, temperature=0,
                                           extra_body={"program_id": "queued"})
            order.append(i)
        except openai.APIStatusError as e:
            codes[i] = (e.status_code, e.code)

    threads = []
    for i in range(9):  # one in flight and eight waiting, started a little apart
        threads.append(threading.Thread(target=turn, args=(i,)))
        threads[-1].start()
        time.sleep(0.03)
    over = http("POST", base + "/v1/chat/completions", {"model": model, "max_tokens": 4, "program_id": "queued",
                                                        "messages": [{"role": "user", "content": "One more."}]})
    for t in threads:
        t.join()
    check(not codes and order == list(range(9)),
          "9 turns of one program at once: each answered, in the order sent %s %s" % (order, codes))
    check(over[0] == 429 and json.loads(over[1])["error"]["code"] == "program_busy",
          "a tenth while nine are there: 429 program_busy (%d)" % over[0])

    # More requests at once than a small HTTP worker pool would take: each stream's first chunk
    # (sent once the request has started) comes before any of them ends, so none sat in a queue
    # the scheduler cannot see.
    firsts, ends = {}, {}

    def stream_long(pid):
        s = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count from 1 to 200."}],
                                           max_tokens=160, temperature=0, stream=True, extra_body={"program_id": pid})
        for _ in s:
            firsts.setdefault(pid, time.time())
        ends[pid] = time.time()

    many = ["many-%d" % i for i in range(12)]
    threads = [threading.Thread(target=stream_long, args=(p,)) for p in many]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(len(firsts) == len(many) and max(firsts.values()) < min(ends.values()),
          "12 streams at once: every one started before any ended (last start %.2f s, first end %.2f s)" %
          (max(firsts.values()) - min(firsts.values()), min(ends.values()) - min(firsts.values())))
    for p in many:
        http("POST", base + "/programs/release", {"program_id": p})

    status, body = http("GET", base + "/programs")
    ids = [p["program_id"] for p in json.loads(body)["data"]]
    check(status == 200 and {"conv-1", "conc-a", "conc-b"} <= set(ids), "GET /programs lists them: %s" % ids)
    status, body = http("GET", base + "/metrics")
    check(status == 200 and "chorus_kv_hit_rate" in body and "chorus_paused_programs" in body, "GET /metrics")
    status, body = http("POST", base + "/programs/release", {"program_id": "conv-1"})
    check(status == 200 and json.loads(body)["released"], "POST /programs/release")
    status, body = http("POST", base + "/programs/release", {"program_id": "conv-1"})
    check(status == 404 and json.loads(body)["error"]["code"] == "program_not_found", "releasing it again: 404")

    # Errors a client gets.
    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        check(False, "unknown model rejected")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and "does not exist" in str(e), "unknown model: 404")
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=-5)
        check(False, "negative max_tokens rejected")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == "max_tokens", "negative max_tokens: 400, param max_tokens")
    status, body = http("POST", base + "/v1/chat/completions", raw=b"{not json")
    check(status == 400 and "not valid JSON" in json.loads(body)["error"]["message"], "malformed JSON: 400")
    status, body = http("POST", base + "/v1/chat/completions", {"model": model, "messages": []})
    check(status == 400 and json.loads(body)["error"]["param"] == "messages", "empty messages: 400")
    status, body = http("POST", base + "/v1/chat/completions", raw=b"{" + b" " * (2 << 20) + b"}")
    check(status == 413 and "too large" in json.loads(body)["error"]["message"], "oversized body: 413")
    status, body = http("GET", base + "/v1/nothing")
    check(status == 404 and "error" in json.loads(body), "unknown route: 404 with a JSON error")
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "still there?"}], max_tokens=4)
    check(r.choices[0].message.content is not None, "the server keeps serving")
finally:
    stop_server(server)

# Memory pressure: 16 KV pages for six programs of 3 to 5 pages each. Programs idle between their
# turns (acting) are paused to make room, and restored — exactly — when their next turn comes.
server, base = start_server("--pages", "16", "--check-period", "0.2", "--host-pages", "0")
try:
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    model = client.models.list().data[0].id
    convs = {}
    for i in range(6):
        pid = "press-%d" % i
        convs[pid] = [{"role": "user", "content": "Say a number."}]
        r = client.chat.completions.create(model=model, messages=convs[pid], max_tokens=12, temperature=0,
                                           extra_body={"program_id": pid})
        convs[pid] += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "Another."}]
        convs[pid + "/t1"] = r.usage.prompt_tokens + r.usage.completion_tokens
        check(r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content is not None,
              "pressure: program %d, turn 1" % i)
    time.sleep(0.5)
    status, body = http("GET", base + "/metrics")
    pauses = float(re.search(r"^chorus_pauses_total (\S+)", body, re.M).group(1))
    check(pauses >= 1, "pressure: programs were paused (%d)" % pauses)
    for i in range(6):
        pid = "press-%d" % i
        r = client.chat.completions.create(model=model, messages=convs[pid], max_tokens=12, temperature=0,
                                           extra_body={"program_id": pid})
        check(r.usage.prompt_tokens_details.cached_tokens == convs[pid + "/t1"],
              "pressure: program %d, turn 2 finds turn 1 in its block (%d of %d)" %
              (i, r.usage.prompt_tokens_details.cached_tokens, convs[pid + "/t1"]))
        # The same history run from scratch (no program) gives the same greedy answer: what was
        # paused and restored is the conversation, exactly.
        fresh = client.chat.completions.create(model=model, messages=convs[pid], max_tokens=12, temperature=0)
        check(fresh.choices[0].message.content == r.choices[0].message.content,
              "pressure: program %d, turn 2 = the same history from scratch (%r)" % (i, r.choices[0].message.content))
    status, body = http("GET", base + "/metrics")
    restores = float(re.search(r"^chorus_restores_total (\S+)", body, re.M).group(1))
    check(restores >= 1, "pressure: programs were restored (%d)" % restores)

    # A request that could never fit the pool (16 pages, 256 positions) is refused up front,
    # rather than waiting for ever or running out half-way.
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=300,
                                       extra_body={"program_id": "too-big"})
        check(False, "a request larger than the pool refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("code") == "context_length_exceeded" and "16 pages" in str(e),
              "a request larger than the pool: 400 context_length_exceeded (%s)" % e.body.get("message"))

    # Six new programs at once, each needing about 4 of the 16 pages: the ones that do not fit
    # wait for room; none is cut short by a full pool (finish "length" means max_tokens).
    burst = {}

    def burst_one(pid):
        try:
            burst[pid] = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Count from one to fifty in words."}],
                max_tokens=24, temperature=0, extra_body={"program_id": pid})
        except Exception as e:  # noqa: BLE001 - the check below reports it
            burst[pid] = e

    threads = [threading.Thread(target=burst_one, args=("burst-%d" % i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for pid, r in sorted(burst.items()):
        ok = not isinstance(r, Exception) and (r.choices[0].finish_reason == "stop" or r.usage.completion_tokens == 24)
        check(ok, "burst: %s ran whole (%s)" % (pid, r if isinstance(r, Exception) else
                                                 "%s, %d tokens" % (r.choices[0].finish_reason, r.usage.completion_tokens)))
finally:
    stop_server(server)

# API keys: --api-key and --api-key-file; the official client with api_key=; every route behind
# the key, /metrics and /health too unless --metrics-public.
import os
import tempfile

keys = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
keys.write("# keys for the test\nsk-from-file\n")
keys.close()
bad = subprocess.run([CHORUS, "serve", "--model", MODEL, "--port", "0", "--api-key-file", "/nonexistent/keys"],
                     capture_output=True, text=True, timeout=60)
check(bad.returncode != 0 and "cannot read the API key file /nonexistent/keys" in bad.stderr,
      "a missing key file stops serve with its name (%r)" % bad.stderr.strip())


def http_auth(method, url, key=None, body=None):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


for public in (False, True):
    options = ["--pages", "128", "--api-key", "sk-on-the-line", "--api-key-file", keys.name]
    server, base = start_server(*(options + (["--metrics-public"] if public else [])))
    try:
        if not public:
            for key in ("sk-on-the-line", "sk-from-file"):
                client = openai.OpenAI(base_url=base + "/v1", api_key=key)
                r = client.chat.completions.create(model=client.models.list().data[0].id, max_tokens=4,
                                                   messages=[{"role": "user", "content": "Hi"}], temperature=0)
                check(r.usage.completion_tokens > 0, "the openai client with a right key (%s) is served" % key)
            try:
                openai.OpenAI(base_url=base + "/v1", api_key="sk-wrong", max_retries=0).models.list()
                check(False, "a wrong key is refused")
            except openai.AuthenticationError as e:
                check(e.status_code == 401 and e.body.get("code") == "invalid_api_key",
                      "a wrong key: the openai client raises AuthenticationError, 401 invalid_api_key")
            code, body, headers = http_auth("POST", base + "/v1/chat/completions",
                                            body={"model": "x", "messages": [{"role": "user", "content": "Hi"}]})
            check(code == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
                  and headers.get("WWW-Authenticate") == "Bearer",
                  "no key: 401 invalid_api_key with WWW-Authenticate: Bearer (%d)" % code)
            code, _, _ = http_auth("POST", base + "/programs/release", key="sk-wrong", body={"program_id": "p"})
            check(code == 401, "program routes are behind the key too (%d)" % code)
        for path in ("/metrics", "/health"):
            code, _, _ = http_auth("GET", base + path)
            check(code == (200 if public else 401),
                  "%s without a key: %d%s" % (path, code, " (--metrics-public)" if public else ""))
            code, _, _ = http_auth("GET", base + path, key="sk-from-file")
            check(code == 200, "%s with a key: %d" % (path, code))
    finally:
        stop_server(server)
os.unlink(keys.name)

serve_support.finish()
