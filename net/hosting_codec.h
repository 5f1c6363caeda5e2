// A program's actors hosted on another node (schemas/hosting.fbs) as frames, and their checked
// decoding: what a coordinator sends a node's actor port, and what comes back.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

using Frame = std::vector<uint8_t>;

// A sink as its topology declares it (topology::Actor's sink fields).
struct SinkSpecData {
  enum class To { stdout_stream, stderr_stream, file, zmq } to = To::stdout_stream;
  std::string name, path, endpoint, topic, prefix;
};
// A tool as its topology declares it (topology::Tool's sandbox fields).
struct ToolSpecData {
  std::string name;
  std::vector<std::string> command, setup;
  double timeout_s = 30;
  uint64_t max_output_bytes = 16 << 10;
  int64_t max_dir_bytes = int64_t{256} << 20;
  std::vector<std::string> env;  // "KEY=VALUE"
  bool network = false;
  std::vector<std::string> read, write;
};

// A source's feed as its topology declares it (a file or a ZeroMQ SUB socket).
struct FeedSpecData {
  enum class From { file, zmq } from = From::file;
  std::string path;
  bool follow = true;
  std::string endpoint, topic;
};

struct HostingMessage {
  enum class Kind { host_sink, host_sandbox, hosted, deliver, unhost, host_feed } kind = Kind::deliver;
  uint64_t request_id = 0;  // the envelope's
  uint64_t program = 0;
  std::string program_name;         // host_sink, host_sandbox
  std::string actor;                // host_sandbox, hosted, deliver, unhost ("": all)
  std::string node;                 // hosted
  Frame frame;                      // deliver: the role frame inside
  SinkSpecData sink;                // host_sink
  std::vector<ToolSpecData> tools;  // host_sandbox
  FeedSpecData feed;                // host_feed (`actor`: the source)
};

Frame encode_host_sink(uint64_t request_id, uint64_t program, const std::string& program_name,
                       const SinkSpecData& sink);
Frame encode_host_sandbox(uint64_t request_id, uint64_t program, const std::string& program_name,
                          const std::string& actor, const std::vector<ToolSpecData>& tools);
Frame encode_hosted(uint64_t request_id, uint64_t program, const std::string& actor, const std::string& node);
Frame encode_deliver(uint64_t request_id, uint64_t program, const std::string& actor,
                     std::span<const uint8_t> frame);
Frame encode_unhost(uint64_t request_id, uint64_t program, const std::string& actor = {});
Frame encode_host_feed(uint64_t request_id, uint64_t program, const std::string& program_name,
                       const std::string& actor, const FeedSpecData& feed);

// Verifies `frame` and reads it (decode_envelope's checks); a verified frame of another protocol
// is an error naming its payload (Errc::bad_format).
Result<HostingMessage> decode_hosting(std::span<const uint8_t> frame);

}  // namespace chorus
