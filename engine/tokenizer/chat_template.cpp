#include "engine/tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {

namespace {

// llama.cpp's and transformers' ChatML, for files without a template.
constexpr std::string_view kChatml =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

}  // namespace

Result<ChatTemplate> ChatTemplate::from_source(std::string source, std::string bos_token,
                                               std::string eos_token) {
  auto jinja = JinjaTemplate::parse(source);
  if (!jinja) return jinja.error();
  ChatTemplate t;
  t.jinja_ = std::move(*jinja);
  t.source_ = std::move(source);
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  return t;
}

ChatTemplate ChatTemplate::chatml() {
  auto t = from_source(std::string(kChatml));
  t->fallback_ = true;
  return std::move(*t);
}

Result<ChatTemplate> ChatTemplate::from_gguf(const GgufFile& gguf, const Tokenizer& tokenizer) {
  if (gguf.find("tokenizer.chat_template") == nullptr) return chatml();
  auto source = gguf.get_string("tokenizer.chat_template");
  if (!source) return source.error();
  auto text = [&](std::optional<TokenId> id) {
    return id && static_cast<size_t>(*id) < tokenizer.vocab_size() ? std::string(tokenizer.token_text(*id))
                                                                   : std::string();
  };
  auto t = from_source(std::string(*source), text(tokenizer.bos()), text(tokenizer.eos()));
  if (!t)
    return make_error(Errc::bad_format, gguf.name() + ": tokenizer.chat_template, " + t.error().message +
                                            " (give a template chorus can render with --chat-template FILE)");
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json vars = extra.is_object() ? extra : nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["tools"] = tools;
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["bos_token"] = bos_;
  vars["eos_token"] = eos_;
  auto out = jinja_.render(vars);
  if (out) return out;
  // The template is sound (it parsed); what made it fail is these messages.
  const Errc code = out.error().code == Errc::out_of_range ? Errc::out_of_range : Errc::invalid_argument;
  return make_error(code, "the chat template refused the messages: " + out.error().message);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         bool add_generation_prompt) const {
  return render(messages, tools, add_generation_prompt, nlohmann::ordered_json::object());
}

namespace {

using ojson = nlohmann::ordered_json;

ojson message_json(const ChatMessage& m) {
  ojson j = {{"role", m.role}};
  j["content"] = m.null_content ? ojson(nullptr) : ojson(m.content);
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::parse(m.tool_calls, nullptr, false);
    if (calls.is_array())
      for (ojson& c : calls)
        if (c.is_object() && c.contains("function") && c["function"].is_object() &&
            c["function"].contains("arguments") && c["function"]["arguments"].is_string()) {
          ojson args = ojson::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
          if (args.is_object()) c["function"]["arguments"] = std::move(args);
        }
    j["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.name.empty()) j["name"] = m.name;
  return j;
}

}  // namespace

Result<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                        const std::string& tools_json) const {
  ojson list = ojson::array();
  for (const ChatMessage& m : messages) list.push_back(message_json(m));
  ojson tools = tools_json.empty() ? ojson(nullptr) : ojson::parse(tools_json, nullptr, false);
  if (tools.is_discarded()) return make_error(Errc::invalid_argument, "tools: not valid JSON");
  return render(list, tools, add_generation_prompt);
}

bool ChatTemplate::renders_tools() const {
  return source_.find("tools") != std::string::npos;
}

}  // namespace chorus
