#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs one of them, or all in turn.
#   scripts/fuzz.sh [TARGET|all] [SECONDS]     default: gguf_fuzz for 300 s
# `all` runs every target for SECONDS each and fails (exit 1) when any of them finds a crash, a
# leak or undefined behaviour, naming it; .ci/run runs `scripts/fuzz.sh all 30`.
# The seed corpus is generated from valid inputs (the default model's header if present) into
# fuzz/corpus-TARGET/ (ignored by git), which keeps what a run grows.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${1:-gguf_fuzz}
SECONDS_TO_RUN=${2:-300}
BUILD=${CHORUS_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
ALL_TARGETS=(gguf_fuzz frame_fuzz topology_fuzz chat_request_fuzz auth_fuzz cluster_record_fuzz
  json_schema_fuzz jinja_fuzz gbnf_fuzz tokenizer_fuzz)

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCHORUS_FUZZ=ON -DCHORUS_TESTS=OFF -DCHORUS_CUDA=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
fi

seed() {  # writes TARGET's seeds into CORPUS
  local target=$1 corpus=$2
  case "$target" in
    frame_fuzz) "$BUILD/fuzz/frame_seeds" "$corpus" ;;
    topology_fuzz) cp "$ROOT"/topologies/*.yaml "$corpus"/ ;;
    chat_request_fuzz) cp "$ROOT"/fuzz/seeds-chat_request/*.json "$corpus"/ ;;
    json_schema_fuzz) cp "$ROOT"/fuzz/seeds-json_schema/*.json "$corpus"/ ;;
    gbnf_fuzz) cp "$ROOT"/fuzz/seeds-gbnf/*.gbnf "$corpus"/ ;;
    jinja_fuzz) cp "$ROOT"/tests/data/chat_templates/*.jinja "$corpus"/ ;;
    tokenizer_fuzz)  # the tokenizer corpus's strings (and byte strings), one file each
      python3 - "$ROOT/tools/goldens/tokenizer_corpus.json" "$corpus" <<'PY'
import json, os, sys
for i, e in enumerate(json.load(open(sys.argv[1], encoding="utf-8"))):
    data = e.encode("utf-8") if isinstance(e, str) else bytes.fromhex(e["hex"])
    open(os.path.join(sys.argv[2], "corpus-%03d" % i), "wb").write(data)
PY
      ;;
    cluster_record_fuzz)
      printf '{"name":"a","endpoint":"tcp://127.0.0.1:5555","events":"","pages":64,"host_pages":0,"device":"cpu","model":{"name":"m","arch":"llama","file":"m.gguf","fingerprint":"3d4f6a9cb9c2507b"},"version":"0.1.0","started_ms":1}' >"$corpus/node"
      printf '{"name":"m","arch":"llama","file":"m.gguf","fingerprint":"00000000000000aa"}' >"$corpus/model"
      printf 'Zm9vYmFy' >"$corpus/b64" ;;
    auth_fuzz) printf 'Bearer sk-one\nsk-one\nsk-two' >"$corpus/good"; printf 'bearer  x \ny' >"$corpus/other"
      printf 'Basic dXNlcg==\n' >"$corpus/basic" ;;
    *) python3 "$ROOT/fuzz/make_seeds.py" "$target" "$corpus" ;;
  esac
}

run_one() {  # fuzzes TARGET for SECONDS_TO_RUN; libFuzzer's exit status is non-zero on a finding
  local target=$1 corpus="$ROOT/fuzz/corpus-$1"
  mkdir -p "$corpus"
  seed "$target" "$corpus"
  local dict=()
  [ -f "$ROOT/fuzz/${target%_fuzz}.dict" ] && dict=(-dict="$ROOT/fuzz/${target%_fuzz}.dict")
  "$BUILD/fuzz/$target" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$ROOT/fuzz/" "${dict[@]}" "$corpus"
}

if [ "$TARGET" = all ]; then
  cmake --build "$BUILD" --target "${ALL_TARGETS[@]}" frame_seeds
  failed=()
  for t in "${ALL_TARGETS[@]}"; do
    echo "== $t, $SECONDS_TO_RUN s"
    run_one "$t" || failed+=("$t")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} of ${#ALL_TARGETS[@]} targets found a crash, leak or UB: ${failed[*]} (inputs: fuzz/crash-*, fuzz/leak-*, fuzz/timeout-*)" >&2
    exit 1
  fi
  echo "fuzz: all ${#ALL_TARGETS[@]} targets ran $SECONDS_TO_RUN s each, nothing found"
  exit 0
fi

cmake --build "$BUILD" --target "$TARGET"
[ "$TARGET" = frame_fuzz ] && cmake --build "$BUILD" --target frame_seeds
run_one "$TARGET"
