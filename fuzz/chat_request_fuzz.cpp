// libFuzzer target for the request parser of `chorus serve` (gateway/openai_request.h): any body
// must be read into a ChatRequest within its limits, or refused with an HttpError (400 or 404)
// whose body is OpenAI-style JSON — never a crash, and never another exception (the gateway
// would answer that with a 500). What the gateway does next with a request, rendering its
// messages with the chat template, runs too. Run under ASan+UBSan; seeds: fuzz/seeds-chat_request,
// dictionary: fuzz/chat_request.dict.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/tokenizer/chat_template.h"
#include "gateway/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  constexpr int kLimit = 4096;
  try {
    const chorus::ChatRequest r = chorus::parse_chat_request(body, "m", 256, kLimit);
    if (r.messages.empty() || r.max_tokens < 1 || r.max_tokens > kLimit || r.stop.size() > 4)
      __builtin_trap();
    if (r.sampling.temperature < 0 || r.sampling.temperature > 2 || r.sampling.top_p < 0 ||
        r.sampling.top_p > 1)
      __builtin_trap();
    if (r.program_id.size() > 128) __builtin_trap();
    for (const std::string& s : r.stop)
      if (s.empty()) __builtin_trap();
    (void)chorus::ChatTemplate::chatml().apply(r.messages, true);
  } catch (const chorus::HttpError& e) {
    if (e.status != 400 && e.status != 404) __builtin_trap();
    const auto j = nlohmann::json::parse(e.body, nullptr, false);
    if (j.is_discarded() || !j.contains("error") || !j["error"].contains("message")) __builtin_trap();
  }
  return 0;  // any other exception escapes: libFuzzer reports it as a crash
}
