#!/usr/bin/env bash
# Set-up (scripts/setup.sh), then the main job: the AsyncLLM paper's thinker-writer agent on a
# question — a thinker reasons while a writer, seeing the thinker's block live, writes a short
# line after each line of reasoning (topologies/thinker_writer.yaml).
#   scripts/demo.sh ["your question"]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
BUILD_DIR=${CHORUS_BUILD_DIR:-$ROOT/build}
QUESTION=${1:-"Why is the sky blue?"}
echo
echo "== chorus run topologies/thinker_writer.yaml --input \"$QUESTION\""
"$BUILD_DIR/chorus" run "$ROOT/topologies/thinker_writer.yaml" --input "$QUESTION"
