#!/usr/bin/env bash
# Set-up (scripts/setup.sh), then the whole test suite. This is what CI runs (.ci/run).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh" --with-gemma
BUILD_DIR=${CHORUS_BUILD_DIR:-$ROOT/build}
# The default model and Gemma 3 270M were just fetched: tests that need them must run, not skip.
export CHORUS_REQUIRE_MODEL=1 CHORUS_REQUIRE_GEMMA=1
ctest --test-dir "$BUILD_DIR" --output-on-failure --parallel "$(nproc)" "$@"
