// What the gateway sends back, shaped as OpenAI's API has it: a reply's text held back at stop
// strings, tool calls and logprobs as JSON. Internal to the gateway library (gateway.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/forward/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/tool_calls.h"

namespace chorus {

// A reply's text on its way to the client: a tail that could begin a stop string is held back
// until it is clear; at a stop string the text ends there.
class StopStrings {
 public:
  explicit StopStrings(const std::vector<std::string>& stops) : stops_(stops) {}
  // The text that may go out now.
  std::string push(const std::string& text);
  // At the end: what was held back (it began no stop string after all).
  std::string flush() { return std::exchange(held_, std::string()); }

 private:
  const std::vector<std::string>& stops_;
  std::string held_;
};

// The calls as a message's `tool_calls` ({id, type, function: {name, arguments}}), with their
// `index` when streamed.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// One entry per generated token: its own logprob, then its alternatives (Event::logprobs).
using TokenLogprobs = std::vector<std::vector<TokenLogprob>>;
// Chat logprobs of entries [from, to): {"content": [{token, logprob, bytes, top_logprobs}],
// "refusal": null}; a token is its text (the bytes it decodes to) and its exact bytes.
nlohmann::json chat_logprobs(const Tokenizer& tok, const TokenLogprobs& entries, size_t from, size_t to);
// Completion logprobs of entries [from, to) in the legacy shape: tokens, token_logprobs,
// top_logprobs ({text: logprob}), text_offset (bytes into the choice's text; `offset` runs on).
nlohmann::json legacy_logprobs(const Tokenizer& tok, const TokenLogprobs& entries, size_t from, size_t to,
                               int64_t& offset);

}  // namespace chorus
