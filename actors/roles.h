// Role actors: small behaviours over the batcher (AsyncLLM's coroutines).
//   thinker — generates into its block under its view; at each configured separator in its text
//             (e.g. a paragraph "\n\n") it tells its subscribers; at the end it says done.
//   writer  — on each such event, generates a short piece into its block under its view (which
//             includes the thinker's block, live), stops at a string, and hands the text to a sink.
#pragma once

#include <caf/actor.hpp>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace chorus {

struct ThinkerConfig {
  std::vector<BlockId> view;
  BlockId write_to = -1;
  std::vector<TokenId> prefill;            // at least one token
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> separators = {"\n\n"};  // text that ends a piece worth announcing
  std::vector<caf::actor> subscribers;     // get (paragraph_atom, text), then (done_atom)
  std::function<void(const std::string&)> on_text;  // live text, as it is generated (optional)
};

struct WriterConfig {
  std::vector<BlockId> view;               // should include the thinker's block and write_to
  BlockId write_to = -1;
  std::vector<TokenId> prefill;            // run before each piece (a turn header, say)
  SamplingParams sampling;
  int max_tokens = 48;
  std::vector<std::string> stop = {"\n"};
  std::function<void(const std::string&)> sink;  // one call per piece written
  caf::actor notify;                       // gets (done_atom) when the thinker is done and all pieces are written
};

caf::actor spawn_thinker(caf::actor_system& sys, caf::actor batcher, ThinkerConfig cfg);
caf::actor spawn_writer(caf::actor_system& sys, caf::actor batcher, WriterConfig cfg);

}  // namespace chorus
