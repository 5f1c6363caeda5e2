// Encoding and checked decoding of envelopes (schemas/envelope.fbs). Every frame that arrives
// from outside the process goes through decode_envelope() before anything reads it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kMaxFrameBytes = 64u << 20;  // frames above this are rejected

std::vector<uint8_t> encode_error_envelope(uint64_t request_id, const Error& error);
std::vector<uint8_t> encode_hello_envelope(uint64_t request_id, const std::string& node_id);

struct EnvelopeSummary {
  uint16_t version = 0;
  uint64_t request_id = 0;
  std::string payload_type;  // the Payload union member: "Error", "Hello", "Generate", ...
  std::string text;          // error message or node id
};

// Verifies `frame` (FlatBuffers verifier, file identifier, size and version limits) and
// summarises it. Errors: Errc::bad_format / Errc::unsupported / Errc::out_of_range, naming
// what is wrong. Never reads outside `frame`.
Result<EnvelopeSummary> decode_envelope(std::span<const uint8_t> frame);

// Program waits (schemas/programs.fbs): a client's request to hear of them, and the news.
std::vector<uint8_t> encode_watch_programs(uint64_t request_id);
std::vector<uint8_t> encode_program_waiting(uint64_t program);
// WatchBlock and its events (schemas/blocks.fbs): a remote probe's `watch`.
std::vector<uint8_t> encode_watch_block(uint64_t request_id, int32_t block);
std::vector<uint8_t> encode_block_grown(int32_t block, int64_t cached);
// The block a WatchBlock frame names; an error for any other frame.
Result<int32_t> decode_watch_block(std::span<const uint8_t> frame);

// The same message under another correlation id (a link that multiplexes many requesters over one
// connection gives each frame an id of its own). Verifies the frame first (decode_envelope);
// readdressed() is the same for a frame verified already (decode_envelope or decode_reply).
Result<std::vector<uint8_t>> with_request_id(std::span<const uint8_t> frame, uint64_t request_id);
std::vector<uint8_t> readdressed(std::span<const uint8_t> verified, uint64_t request_id);

// The wall clock frames carry (Heartbeat, node records): unix milliseconds.
int64_t wall_clock_ms();

}  // namespace chorus
