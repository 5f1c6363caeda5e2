#!/usr/bin/env bash
# A local cluster on loopback (docs/cluster.md): etcd, three `chorus node`s and a coordinator;
# six chat programs of two turns through the coordinator, then where each was placed. Everything
# it starts is stopped at the end. Needs a build (scripts/setup.sh) and etcd (Debian etcd-server).
#   scripts/cluster_demo.sh [MODEL]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHORUS="$ROOT/build/chorus"
MODEL=${1:-${CHORUS_HOME:-$HOME/.cache/chorus}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -x "$CHORUS" ] || { echo "cluster_demo: build first (scripts/setup.sh)" >&2; exit 1; }
command -v etcd >/dev/null || { echo "cluster_demo: etcd is missing (apt-get install etcd-server)" >&2; exit 1; }
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

ETCD_PORT=$(free_port) PEER_PORT=$(free_port) HTTP_PORT=$(free_port)
ETCD="http://127.0.0.1:$ETCD_PORT"
etcd --name demo --data-dir "$TMP/etcd" --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "demo=http://127.0.0.1:$PEER_PORT" --logger zap --log-outputs "$TMP/etcd.log" &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "$ETCD/health" >/dev/null && break; sleep 0.1; done
echo "== etcd on $ETCD"

for n in a b c; do
  "$CHORUS" node --model "$MODEL" --etcd "$ETCD" --name "$n" --endpoint 'tcp://127.0.0.1:*' --pages 256 -t 1 \
    >"$TMP/node-$n.log" 2>&1 &
  PIDS+=($!)
done
"$CHORUS" --log-level info coordinator --model "$MODEL" --etcd "$ETCD" --port "$HTTP_PORT" >"$TMP/coordinator.log" 2>&1 &
PIDS+=($!)
BASE="http://127.0.0.1:$HTTP_PORT"
for _ in $(seq 300); do
  [ "$(curl -s "$BASE/metrics" | grep -c '^chorus_requests_total{node=')" = 3 ] && break
  sleep 0.2
done
echo "== coordinator on $BASE, serving on: $(curl -s "$BASE/cluster" | python3 -c \
  'import json,sys; print(", ".join(n["name"] + (" (up)" if n["up"] else "") for n in json.load(sys.stdin)["nodes"]))')"

NAME=$(basename "$MODEL" .gguf)
missed=0
for p in 1 2 3 4 5 6; do
  history="[{\"role\": \"user\", \"content\": \"Agent $p, name a colour and a reason.\"}]"
  for turn in 1 2; do
    reply=$(curl -s "$BASE/v1/chat/completions" -d "{\"model\": \"$NAME\", \"program_id\": \"agent-$p\",
      \"temperature\": 0, \"max_tokens\": 16, \"messages\": $history}")
    text=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["message"]["content"])' "$reply")
    cached=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["usage"]["prompt_tokens_details"]["cached_tokens"])' "$reply")
    echo "agent-$p turn $turn (cached $cached): $text"
    if [ "$turn" = 2 ] && [ "$cached" = 0 ]; then missed=$((missed + 1)); fi
    history=$(python3 -c 'import json,sys; h=json.loads(sys.argv[1]); h += [{"role": "assistant", "content": sys.argv[2]},
      {"role": "user", "content": "And another?"}]; print(json.dumps(h))' "$history" "$text")
  done
done
echo "== placements (GET /programs)"
curl -s "$BASE/programs" | python3 -c 'import json,sys
for p in json.load(sys.stdin)["data"]: print("  %s on node %s (%d tokens)" % (p["program_id"], p["node"], p["tokens"]))'
echo "== the coordinator's log"
grep -E "placed|joined|serving" "$TMP/coordinator.log" | sed 's/^/  /'
if [ "$missed" != 0 ]; then
  echo "cluster_demo: $missed second turns did not find their first turn on their node" >&2
  exit 1
fi
