// libFuzzer target for the JSON Schema compiler (engine/grammar/json_schema.h): any JSON value
// read from the input compiles into a checked grammar or is refused with invalid_argument —
// never a crash, a hang or another error class. A grammar that compiles is then walked over the
// bytes after the first NUL of the input (the text a model would write): a walk never dies, and
// a state it reaches is empty (the bytes cannot follow) or has a stack to go on with. Run
// under ASan+UBSan; seeds: fuzz/seeds-json_schema.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/grammar/json_schema.h"
#include "fuzz/grammar_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string schema_text = in.substr(0, nul);
  const std::string text = nul == std::string::npos ? "" : in.substr(nul + 1);
  const auto schema = nlohmann::json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return 0;
  auto g = chorus::json_schema_grammar(schema);
  if (!g) {
    if (g.error().code != chorus::Errc::invalid_argument || g.error().message.empty()) __builtin_trap();
    return 0;
  }
  chorus::fuzz::walk(std::move(*g), text);
  return 0;
}
