// Role actors: small behaviours over the batcher (AsyncLLM's coroutines).
//   thinker — generates into its block under its view; at each configured separator in its text
//             (e.g. a paragraph "\n\n") it tells its subscribers; at the end it says done.
//   writer  — on each such event, generates a short piece into its block under its view (which
//             includes the thinker's block, live), stops at a string, and hands the text to a sink.
#pragma once

#include <caf/actor.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/step/engine.h"

namespace chorus {

struct ThinkerConfig {
  std::vector<BlockId> view;
  BlockId write_to = -1;
  std::vector<TokenId> prefill;  // at least one token
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> separators = {"\n\n"};   // text that ends a piece worth announcing
  std::vector<caf::actor> subscribers;              // get (paragraph_atom, text), then (done_atom)
  std::function<void(const std::string&)> on_text;  // live text, as it is generated (optional)
};

struct WriterConfig {
  std::vector<BlockId> view;  // should include the thinker's block and write_to
  BlockId write_to = -1;
  std::vector<TokenId> prefill;  // run before each piece (a turn header, say)
  SamplingParams sampling;
  int max_tokens = 48;
  std::vector<std::string> stop = {"\n"};
  std::function<void(const std::string&)> sink;  // one call per piece written
  caf::actor notify;  // gets (done_atom) when the thinker is done and all pieces are written
};

// probe — asks a question over a view whenever its trigger fires, and tells its subscribers
//         (fired_atom, candidate index, probability) when a candidate's probability reaches
//         the threshold. Triggers: every `every_new_tokens` new cached tokens of a watched block,
//         a timer (every `every_ms`), and any (paragraph_atom, text) or (text_atom, text) message
//         it receives. A trigger while a question is out asks once more after it.
struct ProbeConfig {
  std::vector<BlockId> view;
  std::vector<TokenId> question;
  std::vector<std::vector<TokenId>> candidates;
  int watch_candidate = 0;  // which candidate's probability is compared
  float threshold = 0.5f;
  BlockId watch = -1;  // block whose growth triggers the probe (-1: none)
  int64_t every_new_tokens = 64;
  int every_ms = 0;  // also ask on a timer, this often (0: no timer)
  std::vector<caf::actor> subscribers;
  std::function<void(float)> on_answer;  // every answer, fired or not (optional)
};

// source — appends external text to a block as it arrives: each (text_atom, text) message is
//          tokenized and run into the block under the view (a Forward), in arrival order.
//          A file that is being appended to can feed it (spawn_file_tail()), so can stdin or a
//          pipe (spawn_fd_lines()) or a ZeroMQ SUB socket (spawn_zmq_sub_source()).
struct SourceConfig {
  std::vector<BlockId> view;
  BlockId write_to = -1;
  const Tokenizer* tokenizer = nullptr;  // REQUIRES: outlives the actor
};

// sink — writes each (text_atom, text) it receives to a stream (stdout by default) or a callback.
struct SinkConfig {
  std::FILE* stream = stdout;
  std::function<void(const std::string&)> callback;  // used instead of the stream when set
};

caf::actor spawn_thinker(caf::actor_system& sys, caf::actor batcher, ThinkerConfig cfg);
caf::actor spawn_probe(caf::actor_system& sys, caf::actor batcher, ProbeConfig cfg);
caf::actor spawn_source(caf::actor_system& sys, caf::actor batcher, SourceConfig cfg);
caf::actor spawn_sink(caf::actor_system& sys, SinkConfig cfg);

// Follows a file as it is appended to (like tail -f, from its current end or from the start):
// every complete line is sent to `target` as (text_atom, line + "\n"). A detached actor that
// polls every `poll_ms`; ends on stop_atom or an exit message.
caf::actor spawn_file_tail(caf::actor_system& sys, const std::string& path, caf::actor target,
                           bool from_start = true, int poll_ms = 20);
// Reads lines from a file descriptor (stdin: 0, a pipe, a socket) as they arrive: each complete
// line goes to `target` as (text_atom, line + "\n"); at end of input the last partial line (if
// any) goes too, then `notify` (if set) gets (done_atom) and the actor ends. stop_atom or an exit
// message ends it earlier (also with done_atom). A detached actor; the fd is not closed.
caf::actor spawn_fd_lines(caf::actor_system& sys, int fd, caf::actor target, caf::actor notify = {},
                          int poll_ms = 20);
caf::actor spawn_writer(caf::actor_system& sys, caf::actor batcher, WriterConfig cfg);

}  // namespace chorus
