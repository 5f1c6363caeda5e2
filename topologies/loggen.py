#!/usr/bin/env python3
"""Sample log generator for log_monitor.yaml: writes service log lines to a file at a steady
rate and injects incidents (errors a monitor should catch) at known lines.

  python3 topologies/loggen.py /tmp/app.log --lines 500 --incidents 5 --rate 50

Prints one JSON object per incident to stdout ({"line": N, "text": ...}, 1-based line
numbers) so a test can score what the monitor caught. Deterministic for a given --seed.
"""
import argparse
import json
import random
import sys
import time

NORMAL = [
    "INFO  web-{n} GET /api/items/{i} 200 {ms}ms",
    "INFO  web-{n} POST /api/orders 201 {ms}ms",
    "INFO  auth-{n} user {u} signed in",
    "INFO  cache-{n} hit ratio 0.9{d} over the last minute",
    "DEBUG worker-{n} job {i} finished in {ms}ms",
    "INFO  web-{n} GET /health 200 1ms",
]
INCIDENTS = [
    "ERROR db-{n} connection refused: too many clients ({i} open)",
    "ERROR disk-{n} /var/data is full: write failed (No space left on device)",
    "FATAL worker-{n} out of memory: killed process {i}",
    "ERROR web-{n} GET /api/orders 500 internal server error: null pointer",
    "ERROR auth-{n} certificate expired: TLS handshake failed",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="log file to write (appended to, line by line)")
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--incidents", type=int, default=5)
    ap.add_argument("--rate", type=float, default=50.0, help="lines per second; 0: as fast as possible")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.incidents * 20 > args.lines:
        sys.exit("loggen: keep at least 20 lines per incident")
    rng = random.Random(args.seed)
    # Incidents spread out: one in each equal slice of the log, never in its first 10 lines.
    slice_len = args.lines // args.incidents
    at = {s * slice_len + rng.randrange(10, slice_len): s for s in range(args.incidents)}
    with open(args.out, "a", buffering=1) as f:
        for line in range(1, args.lines + 1):
            fields = dict(n=rng.randrange(1, 9), i=rng.randrange(1000, 99999), ms=rng.randrange(2, 90),
                          u=rng.choice(["ana", "bo", "chen", "dara", "eli"]), d=rng.randrange(0, 9))
            stamp = "2026-11-29T12:%02d:%02d" % (line // 60 % 60, line % 60)
            if line in at:
                text = INCIDENTS[at[line] % len(INCIDENTS)].format(**fields)
                print(json.dumps({"line": line, "text": text}), flush=True)
            else:
                text = rng.choice(NORMAL).format(**fields)
            f.write("%s %s\n" % (stamp, text))
            if args.rate > 0:
                time.sleep(1.0 / args.rate)


if __name__ == "__main__":
    main()
