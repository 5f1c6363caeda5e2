// Chat prompts. chorus renders ChatML (the template of SmolLM2 and Qwen models) natively
// instead of evaluating the Jinja template stored in the GGUF:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
// Encode the result with EncodeOptions{.parse_special = true}.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

class GgufFile;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
};

class ChatTemplate {
 public:
  // Reads `tokenizer.chat_template`: ChatML is recognised by its <|im_start|> markers, and a
  // default system prompt the template inserts when none is given (SmolLM2 has one) is kept.
  // Errors: Errc::unsupported when the file's template is not ChatML.
  static Result<ChatTemplate> from_gguf(const GgufFile& gguf);
  static ChatTemplate chatml(std::optional<std::string> default_system = std::nullopt);

  // The prompt for `messages`; with `add_generation_prompt`, ends ready for the assistant.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;

  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  std::optional<std::string> default_system_;
};

}  // namespace chorus
