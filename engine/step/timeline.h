// The timeline of a trace (engine/step/trace.h's JSON, as `--trace FILE` writes it): what a person
// reads from it at a glance. `chorus trace FILE` prints the summary; `--html OUT.html` writes a
// self-contained page — one lane per block with its text growing as it was written (a slider and
// a play button move through time), the roles' events, and the engine's steps beneath, on one time
// axis. docs/trace.md shows it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

struct TimelineBlock {
  int64_t id = 0;
  std::string name;      // the lane's name: "thoughts (3)"
  int64_t tokens = 0;    // appended within the trace
  int64_t appends = 0;   // steps that appended to it
  int64_t length = 0;    // what it held after its last append (less than `tokens` once cleared)
  int64_t first_us = 0;  // its first append, since the trace's first event
  std::string text;      // what was appended, in order
};

struct TimelineSummary {
  double seconds = 0;   // first event to last
  int64_t events = 0;   // records of the file, metadata apart
  int64_t dropped = 0;  // what the recorder's ring let fall (otherData.dropped)
  int64_t steps = 0;
  int64_t decode_tokens = 0, prefill_tokens = 0, probe_tokens = 0;
  int64_t requests = 0;  // request spans begun
  int64_t role_events = 0;
  int64_t memory_events = 0;          // pauses and restores
  std::vector<TimelineBlock> blocks;  // by first append
};

// Reads a trace file's text. Errors (invalid_argument): not JSON, no `traceEvents` list, or an
// event whose fields have the wrong types — naming the event's index.
Result<TimelineSummary> summarize_trace(const std::string& json);

// The page (HTML with the data and its script inline: no network, opens from a file).
// Errors: summarize_trace's. `summary`, when given, gets what summarize_trace would return.
Result<std::string> timeline_html(const std::string& json, const std::string& title,
                                  TimelineSummary* summary = nullptr);

// The summary as lines of text (`chorus trace FILE`).
std::string describe(const TimelineSummary& s);

}  // namespace chorus
