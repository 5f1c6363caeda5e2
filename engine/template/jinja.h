// A Jinja template interpreter for the chat templates GGUF files carry
// (`tokenizer.chat_template`), written to render exactly what Python's jinja2 renders with
// transformers' settings: trim_blocks, lstrip_blocks, loop controls, `tojson` as json.dumps
// with ensure_ascii=False, raise_exception and strftime_now as globals, and the immutable
// sandbox (list.append, dict.update refused). docs/chat-templates.md lists what is covered.
//
// Parsing checks the whole template (syntax, filter and test names), so a template chorus
// cannot render is an error when the model loads, not when a request arrives.
//
// Thread-safe: a parsed JinjaTemplate is immutable; render may run on many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace chorus {

namespace jinja {
struct Program;
}

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;  // a longer rendering is an error
  size_t max_steps = 10'000'000;        // statements and loop iterations run
  int max_call_depth = 64;              // macro calls nested
};

class JinjaTemplate {
 public:
  // Errors: Errc::bad_format with "line N: what", e.g. "line 3: no filter named 'tojsn'".
  static Result<JinjaTemplate> parse(std::string_view source);

  // Renders with `vars` (a JSON object: messages, tools, add_generation_prompt, bos_token, ...)
  // as the template's variables. Errors: Errc::invalid_argument when the template refuses its
  // input (raise_exception: the message is the template's own), Errc::out_of_range past a
  // limit, Errc::bad_format for anything else that goes wrong ("line 12: 'NoneType' object
  // is not iterable").
  Result<std::string> render(const nlohmann::ordered_json& vars, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace chorus
