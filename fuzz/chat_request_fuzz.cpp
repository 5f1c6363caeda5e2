// libFuzzer target for the request parsers of `chorus serve` (gateway/openai_request.h): any body
// must be read into a ChatRequest within its limits — as a chat request, and as a completion
// request (/v1/completions) — or refused with an HttpError (400 or 404)
// whose body is OpenAI-style JSON — never a crash, and never another exception (the gateway
// would answer that with a 500). What the gateway does next with a request, rendering its
// messages with the chat template, runs too. The same body is read as an Anthropic Messages and as
// an OpenAI Responses request (gateway/api_requests.h), and the chat request each means is read
// as above: refused the same way, or within the same limits. Run under ASan+UBSan; seeds:
// fuzz/seeds-chat_request, dictionary: fuzz/chat_request.dict.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/tokenizer/chat_template.h"
#include "gateway/api_requests.h"
#include "gateway/openai_request.h"

namespace {

constexpr int kLimit = 4096;
constexpr int kVocab = 1000;

void refusal_is_openai_style(const chorus::HttpError& e) {
  if (e.status != 400 && e.status != 404) __builtin_trap();
  const auto j = nlohmann::json::parse(e.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].contains("message")) __builtin_trap();
}

// What both kinds of request must hold to once read.
void within_limits(const chorus::ChatRequest& r) {
  if (r.max_tokens < 1 || r.max_tokens > kLimit || r.stop.size() > 4) __builtin_trap();
  if (r.n < 1 || r.n > chorus::kMaxChoices || r.sampling.logprobs > chorus::kMaxLogprobs) __builtin_trap();
  for (const auto& [t, b] : r.sampling.logit_bias)
    if (t < 0 || t >= kVocab || b < -100 || b > 100) __builtin_trap();
  for (chorus::TokenId t : r.prompt_ids)
    if (t < 0 || t >= kVocab) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const chorus::ChatRequest r = chorus::parse_completion_request(body, "m", kLimit, kVocab);
    within_limits(r);
    if (!r.completion || (r.prompt_ids.empty() && !r.messages.empty())) __builtin_trap();
  } catch (const chorus::HttpError& e) {
    refusal_is_openai_style(e);
  }
  try {
    const chorus::ChatRequest r = chorus::parse_chat_request(body, "m", 256, kLimit, kVocab);
    within_limits(r);
    if (r.messages.empty()) __builtin_trap();
    if (r.sampling.temperature < 0 || r.sampling.temperature > 2 || r.sampling.top_p < 0 ||
        r.sampling.top_p > 1)
      __builtin_trap();
    if (r.program_id.size() > 128) __builtin_trap();
    for (const std::string& s : r.stop)
      if (s.empty()) __builtin_trap();
    (void)chorus::ChatTemplate::chatml().apply(r.messages, true);
  } catch (const chorus::HttpError& e) {
    refusal_is_openai_style(e);
  }
  const auto j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return 0;
  for (int api = 0; api < 2; ++api) {
    try {
      const auto chat = api == 0 ? chorus::messages_as_chat(j)
                                 : chorus::responses_as_chat(j, nlohmann::ordered_json::array());
      const chorus::ChatRequest r = chorus::parse_chat_request(chat.dump(), "m", 256, kLimit, kVocab);
      within_limits(r);
      if (r.messages.empty()) __builtin_trap();
      (void)chorus::ChatTemplate::chatml().apply(r.messages, true);
    } catch (const chorus::HttpError& e) {
      refusal_is_openai_style(e);
    }
  }
  return 0;  // any other exception escapes: libFuzzer reports it as a crash
}
