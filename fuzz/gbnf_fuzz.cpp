// libFuzzer target for the GBNF compiler (engine/grammar/gbnf.h): any text up to the first NUL
// compiles into a checked grammar or is refused with invalid_argument and a message — never a
// crash, a hang or another error class. A grammar that compiles is walked over the bytes after
// the NUL, as json_schema_fuzz does. Run under ASan+UBSan; seeds: fuzz/seeds-gbnf, dictionary:
// fuzz/gbnf.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/grammar/gbnf.h"
#include "fuzz/grammar_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string grammar = in.substr(0, nul);
  const std::string text = nul == std::string::npos ? "" : in.substr(nul + 1);
  auto g = chorus::gbnf_grammar(grammar);
  if (!g) {
    if (g.error().code != chorus::Errc::invalid_argument || g.error().message.empty()) __builtin_trap();
    return 0;
  }
  chorus::fuzz::walk(std::move(*g), text);
  return 0;
}
