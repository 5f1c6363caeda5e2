// Chat prompts, rendered by the model's own template: the Jinja text a GGUF file carries in
// `tokenizer.chat_template`, run by chorus's interpreter (engine/template/jinja.h) with what
// transformers passes it: messages, tools, add_generation_prompt, bos_token, eos_token. ChatML
// only where the file has no template. A template chorus cannot parse is an error when it is
// read, never a silent fallback. Encode the result with EncodeOptions{.parse_special = true}
// and no added BOS: the template writes {{ bos_token }} where it wants one.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "engine/template/jinja.h"

namespace chorus {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_)
      : role(std::move(role_)), content(std::move(content_)) {}

  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  std::string tool_calls;     // assistant: its calls, an OpenAI `tool_calls` JSON array ("": none)
  std::string tool_call_id;   // tool: the call it answers
  std::string name;           // tool: the function's name, where given
  bool null_content = false;  // assistant: `content: null` (a turn of tool calls only)
};

class ChatTemplate {
 public:
  // The file's template, with its BOS and EOS tokens' text; ChatML when it has none.
  // Errors: Errc::bad_format naming the key and the template line.
  static Result<ChatTemplate> from_gguf(const GgufFile& gguf, const Tokenizer& tokenizer);
  // A template's text (a file given with --chat-template, a test's).
  static Result<ChatTemplate> from_source(std::string source, std::string bos_token = {},
                                          std::string eos_token = {});
  // <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
  static ChatTemplate chatml();

  // The prompt for `messages` (OpenAI-shaped: role, content, and tool_calls, tool_call_id,
  // name as given), `tools` (a list, or null), and any extra variables (e.g. enable_thinking).
  // Errors: Errc::invalid_argument when the template refuses the messages (its own
  // raise_exception text, e.g. "Conversation roles must alternate user/assistant/..."),
  // Errc::bad_format when it fails on them.
  Result<std::string> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                             bool add_generation_prompt, const nlohmann::ordered_json& extra) const;
  Result<std::string> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                             bool add_generation_prompt) const;
  // Turns as chat requests carry them, and the request's tools (an OpenAI `tools` JSON array;
  // "": none). A call's `arguments`, a JSON string on the wire, reaches the template as the
  // object it encodes (templates print it with tojson), as llama.cpp and transformers do.
  Result<std::string> apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                            const std::string& tools_json = "") const;

  // Whether the template itself shows the model its tools (it reads `tools`); when not, the
  // gateway describes them in a system turn.
  bool renders_tools() const;

  const std::string& source() const { return source_; }
  bool is_chatml_fallback() const { return fallback_; }  // the file had no template

 private:
  JinjaTemplate jinja_;
  std::string source_;
  std::string bos_, eos_;
  bool fallback_ = false;
};

}  // namespace chorus
