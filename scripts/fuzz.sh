#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs one of them.
#   scripts/fuzz.sh [TARGET] [SECONDS]     default: gguf_fuzz for 300 s
# The seed corpus is generated from valid files (the default model's header if present).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${1:-gguf_fuzz}
SECONDS_TO_RUN=${2:-300}
BUILD=${CHORUS_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCHORUS_FUZZ=ON -DCHORUS_TESTS=OFF -DCHORUS_CUDA=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" \
    -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer"
fi
cmake --build "$BUILD" --target "$TARGET"
CORPUS="$ROOT/fuzz/corpus-$TARGET"
mkdir -p "$CORPUS"
case "$TARGET" in
  frame_fuzz) cmake --build "$BUILD" --target frame_seeds && "$BUILD/fuzz/frame_seeds" "$CORPUS" ;;
  topology_fuzz) cp "$ROOT"/topologies/*.yaml "$CORPUS"/ ;;
  chat_request_fuzz) cp "$ROOT"/fuzz/seeds-chat_request/*.json "$CORPUS"/ ;;
  json_schema_fuzz) cp "$ROOT"/fuzz/seeds-json_schema/*.json "$CORPUS"/ ;;
  gbnf_fuzz) cp "$ROOT"/fuzz/seeds-gbnf/*.gbnf "$CORPUS"/ ;;
  jinja_fuzz) cp "$ROOT"/tests/data/chat_templates/*.jinja "$CORPUS"/ ;;
  tokenizer_fuzz)  # the tokenizer corpus's strings (and byte strings), one file each
    python3 - "$ROOT/tools/goldens/tokenizer_corpus.json" "$CORPUS" <<'PY'
import json, os, sys
for i, e in enumerate(json.load(open(sys.argv[1], encoding="utf-8"))):
    data = e.encode("utf-8") if isinstance(e, str) else bytes.fromhex(e["hex"])
    open(os.path.join(sys.argv[2], "corpus-%03d" % i), "wb").write(data)
PY
    ;;
  cluster_record_fuzz)
    printf '{"name":"a","endpoint":"tcp://127.0.0.1:5555","events":"","pages":64,"host_pages":0,"device":"cpu","model":{"name":"m","arch":"llama","file":"m.gguf","fingerprint":"3d4f6a9cb9c2507b"},"version":"0.1.0","started_ms":1}' >"$CORPUS/node"
    printf '{"name":"m","arch":"llama","file":"m.gguf","fingerprint":"00000000000000aa"}' >"$CORPUS/model"
    printf 'Zm9vYmFy' >"$CORPUS/b64" ;;
  auth_fuzz) printf 'Bearer sk-one\nsk-one\nsk-two' >"$CORPUS/good"; printf 'bearer  x \ny' >"$CORPUS/other"
    printf 'Basic dXNlcg==\n' >"$CORPUS/basic" ;;
  *) python3 "$ROOT/fuzz/make_seeds.py" "$TARGET" "$CORPUS" ;;
esac
DICT=()
[ -f "$ROOT/fuzz/${TARGET%_fuzz}.dict" ] && DICT=(-dict="$ROOT/fuzz/${TARGET%_fuzz}.dict")
"$BUILD/fuzz/$TARGET" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -rss_limit_mb=2048 \
  -print_final_stats=1 "${DICT[@]}" "$CORPUS"
