"""What the `chorus serve` client tests share: checks that print as they go and are counted, and
a server on a free port that stops on SIGTERM."""
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def start_server(chorus, model, *options):
    """`chorus serve` on a free port; returns the process and its base URL."""
    server = subprocess.Popen([chorus, "serve", "--model", model, "--port", "0"] + list(options),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = server.stdout.readline()
    m = re.search(r"http://([0-9.]+):(\d+)/v1", line)
    if not m:
        print(line + server.stdout.read())
        server.kill()
        sys.exit("chorus serve did not start")
    return server, "http://%s:%s" % (m.group(1), m.group(2))


def stop_server(server):
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        failures.append("chorus serve did not stop on SIGTERM")


def post(base, path, body, timeout=120, headers=None):
    """POSTs `body` as JSON (with `headers` besides); returns the status and the parsed reply (an error's too)."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def finish():
    """Exits 1 when a check failed, else 0."""
    print("%d failures" % len(failures))
    sys.exit(1 if failures else 0)
