#!/usr/bin/env bash
# Set-up (scripts/setup.sh), then the main job: describe the default model and tokenize a
# chat prompt with it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
BUILD_DIR=${CHORUS_BUILD_DIR:-$ROOT/build}
QUESTION=${1:-"What is the capital of France?"}
echo
"$BUILD_DIR/chorus" info --check-runtime
echo
echo "== chorus tokenize --chat --pieces \"$QUESTION\""
"$BUILD_DIR/chorus" tokenize --chat --pieces "$QUESTION"
