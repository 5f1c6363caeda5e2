// libFuzzer target for the Jinja interpreter (engine/template/jinja.h): any bytes as a template,
// parsed and, when they parse, rendered on a small conversation with tight limits. Nothing may
// crash, hang or grow without bound; every failure must be an Error naming a line.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/template/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  auto t = chorus::JinjaTemplate::parse(src);
  if (!t) {
    if (t.error().message.rfind("line ", 0) != 0) __builtin_trap();
    return 0;
  }
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                  "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "2"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  chorus::RenderLimits limits;
  limits.max_steps = 20000;
  limits.max_output_bytes = 1 << 16;
  limits.max_call_depth = 16;
  auto r = t->render(vars, limits);
  if (r && r->size() > limits.max_output_bytes) __builtin_trap();
  return 0;
}
