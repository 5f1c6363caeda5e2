#!/usr/bin/env bash
# Set-up (scripts/setup.sh), then the whole test suite. This is what CI runs (.ci/run).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
BUILD_DIR=${CHORUS_BUILD_DIR:-$ROOT/build}
# The default model was just fetched: tests that need it must run, not skip.
export CHORUS_REQUIRE_MODEL=1
ctest --test-dir "$BUILD_DIR" --output-on-failure --parallel "$(nproc)" "$@"
