#!/usr/bin/env bash
# Builds llama.cpp's own tools -- llama-bench, llama-batched-bench, llama-server and
# llama-quantize -- from the llama.cpp tree inside the PyPI source distribution of
# llama-cpp-python (pinned below), once, into a cache. The benchmark scripts compare chorus
# against these native tools, not against the Python binding (which is slower and flatters us).
#
#   tools/bench/build_llamacpp.sh            # prints the bin directory on its last line
#
# Environment:
#   CHORUS_HOME          cache root (default ~/.cache/chorus); the build goes to
#                        $CHORUS_HOME/llama.cpp-$VERSION
#   LLAMACPP_NATIVE=0    build without -march=native (default: native, as a user of this
#                        machine would build it, less AMX: see below)
#   LLAMACPP_JOBS        build parallelism (default: nproc)
# A -j2 Release build of the four tools takes about 9 minutes on 2 cores.
set -euo pipefail

VERSION=0.3.36
CHORUS_HOME=${CHORUS_HOME:-$HOME/.cache/chorus}
DEST="$CHORUS_HOME/llama.cpp-$VERSION"
BIN="$DEST/build/bin"
TOOLS=(llama-bench llama-batched-bench llama-server llama-quantize)
NATIVE=${LLAMACPP_NATIVE:-1}
JOBS=${LLAMACPP_JOBS:-$(nproc)}

log() { printf '[llama.cpp] %s\n' "$*" >&2; }

have_all() {
  for t in "${TOOLS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
  [ -f "$DEST/.native-$NATIVE-noamx" ]
}

if have_all; then
  log "cached: $BIN"
  echo "$BIN"
  exit 0
fi

mkdir -p "$DEST"
if [ ! -f "$DEST/src/CMakeLists.txt" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  log "fetching the llama-cpp-python $VERSION source distribution from PyPI"
  python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check \
    "llama-cpp-python==$VERSION" -d "$tmp"
  tar -xzf "$tmp"/llama_cpp_python-"$VERSION".tar.gz -C "$tmp"
  rm -rf "$DEST/src"
  mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$DEST/src"
fi

native_flag=ON
[ "$NATIVE" = 1 ] || native_flag=OFF
# The machines of this project report AMX in /proc/cpuinfo, but the kernel does not grant the
# tile state: llama.cpp built with -march=native then dies with SIGILL in its first AMX kernel
# (tilezero in tinygemm_kernel_amx). Explicit -mno-amx-* win over -march=native in GCC.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
log "configuring (GGML_NATIVE=$native_flag without AMX, Release, CPU only)"
cmake -S "$DEST/src" -B "$DEST/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
  -DGGML_NATIVE="$native_flag" -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
log "building ${TOOLS[*]} with -j$JOBS"
cmake --build "$DEST/build" --parallel "$JOBS" --target "${TOOLS[@]}" >&2
rm -f "$DEST"/.native-*
touch "$DEST/.native-$NATIVE-noamx"
have_all || { log "build finished but a tool is missing under $BIN"; exit 1; }
echo "$BIN"
