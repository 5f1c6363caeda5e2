#include "engine/tokenizer/chat_template.h"

#include "engine/model/gguf.h"

namespace chorus {

ChatTemplate ChatTemplate::chatml(std::optional<std::string> default_system) {
  ChatTemplate t;
  t.default_system_ = std::move(default_system);
  return t;
}

Result<ChatTemplate> ChatTemplate::from_gguf(const GgufFile& gguf) {
  if (gguf.find("tokenizer.chat_template") == nullptr) return chatml();
  const auto tmpl = gguf.get_string("tokenizer.chat_template");
  if (!tmpl) return tmpl.error();
  const std::string_view s = *tmpl;
  if (s.find("<|im_start|>") == std::string_view::npos)
    return make_error(Errc::unsupported, gguf.name() +
                                             ": tokenizer.chat_template is not ChatML; chorus "
                                             "renders ChatML prompts only");
  // A literal system turn in the template is the default system prompt, e.g. SmolLM2's
  // '<|im_start|>system\nYou are a helpful AI assistant named SmolLM...<|im_end|>\n'.
  constexpr std::string_view marker = "<|im_start|>system";
  const size_t at = s.find(marker);
  if (at == std::string_view::npos) return chatml();
  size_t begin = at + marker.size();
  if (s.compare(begin, 2, "\\n") == 0)
    begin += 2;  // escaped newline in a literal
  else if (begin < s.size() && s[begin] == '\n')
    begin += 1;
  else
    return chatml();  // e.g. "system" followed by code
  const size_t end = s.find("<|im_end|>", begin);
  if (end == std::string_view::npos) return chatml();
  const std::string_view text = s.substr(begin, end - begin);
  if (text.find_first_of("{}'\"") != std::string_view::npos) return chatml();  // not a literal
  return chatml(std::string(text));
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  };
  if (default_system_ && (messages.empty() || messages.front().role != "system"))
    turn("system", *default_system_);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace chorus
