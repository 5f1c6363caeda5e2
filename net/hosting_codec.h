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

// A probe's role as the program's process resolved it (program_roles::ProbeRoleConfig).
struct ProbeSpecData {
  std::string name;
  Frame request;         // a Probe frame: view, question tokens, candidates
  std::string question;  // with {{event}}: filled in here, tokenized by the blocks' node; else ""
  std::vector<int> fire_on;
  float threshold = 0.5f;
  bool edge = true;
  std::string fires;
  int64_t watch = -1;
  int64_t every_new_tokens = 0;
  int every_ms = 0;
  std::vector<std::string> on, after, upstream;
};

// Which way a Relay goes (schemas/hosting.fbs RelayTo): role frames both ways; up, the role's
// engine requests and watches; down, the engine's answers and events.
enum class RelayTo { role, engine, answer, event, watch };

struct HostingMessage {
  enum class Kind {
    host_sink,
    host_sandbox,
    hosted,
    deliver,
    unhost,
    host_feed,
    host_probe,
    relay
  } kind = Kind::deliver;
  uint64_t request_id = 0;  // the envelope's
  uint64_t program = 0;
  std::string program_name;         // host_sink, host_sandbox
  std::string actor;                // host_sandbox, hosted, deliver, unhost ("": all)
  std::string node;                 // hosted
  Frame frame;                      // deliver: the role frame inside
  SinkSpecData sink;                // host_sink
  std::vector<ToolSpecData> tools;  // host_sandbox
  FeedSpecData feed;                // host_feed (`actor`: the source)
  ProbeSpecData probe;              // host_probe (`actor`: the probe)
  RelayTo to = RelayTo::role;       // relay (`frame`: what it carries)
  uint64_t seq = 0;                 // relay: engine, answer (the request's); watch (the block)
  std::string text;                 // relay: engine (what the question asks about)
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
Frame encode_host_probe(uint64_t request_id, uint64_t program, const std::string& program_name,
                        const ProbeSpecData& probe);
Frame encode_relay(uint64_t request_id, uint64_t program, const std::string& actor, RelayTo to, uint64_t seq,
                   std::span<const uint8_t> frame, const std::string& text = {});

// Verifies `frame` and reads it (decode_envelope's checks); a verified frame of another protocol
// is an error naming its payload (Errc::bad_format).
Result<HostingMessage> decode_hosting(std::span<const uint8_t> frame);

}  // namespace chorus
