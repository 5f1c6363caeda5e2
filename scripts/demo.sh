#!/usr/bin/env bash
# The set-up the demo needs (scripts/setup.sh --demo: the packages the build links, the model, the
# `chorus` command alone; the test command sets up and builds the rest), then the main job: the AsyncLLM paper's thinker-writer agent on a
# question — a thinker reasons while a writer, seeing the thinker's block live, writes a short
# line after each line of reasoning (topologies/thinker_writer.yaml). The run is traced, and its
# timeline page made: where both are is the last thing printed.
#   scripts/demo.sh ["your question"]
#   CHORUS_DEMO_DIR   where the trace and the timeline go (default: a new directory under /tmp)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh" --demo
BUILD_DIR=${CHORUS_BUILD_DIR:-$ROOT/build}
QUESTION=${1:-"Why is the sky blue?"}
OUT=${CHORUS_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/chorus-demo.XXXXXX")}
mkdir -p "$OUT"
echo
echo "== chorus run topologies/thinker_writer.yaml --input \"$QUESTION\" --trace $OUT/trace.json"
"$BUILD_DIR/chorus" run "$ROOT/topologies/thinker_writer.yaml" --input "$QUESTION" --trace "$OUT/trace.json"
"$BUILD_DIR/chorus" trace "$OUT/trace.json" --html "$OUT/timeline.html" > /dev/null
echo
echo "== the trace of this run: $OUT/trace.json (open it at https://ui.perfetto.dev)"
echo "== its timeline: $OUT/timeline.html -- open it in a browser and press play:"
echo "   the thinker's and the writer's blocks grow side by side, the engine's steps beneath"
