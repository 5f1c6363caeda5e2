#include "gateway/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <random>

#include "base/text.h"

namespace chorus {

namespace {

using json = nlohmann::json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kMistral = "[TOOL_CALLS]";

std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int k = 0; k < 24; ++k) id += digits[rng() % (sizeof digits - 1)];
  return id;
}

bool all_space(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The text of member `key` of the JSON object `text` (valid JSON), as written: strings skipped
// over with their escapes, nesting counted. "" when the object has no such member.
std::string_view member_text(std::string_view text, std::string_view key) {
  int depth = 0;
  size_t value_from = std::string_view::npos;
  bool after_key = false;  // a depth-1 string followed by ':' is a key
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      const size_t from = i++;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      if (depth == 1 && value_from == std::string_view::npos) {
        size_t k = i + 1;
        while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
        after_key = k < text.size() && text[k] == ':' && text.substr(from + 1, i - from - 1) == key;
        if (after_key) {
          value_from = k + 1;
          i = k;
        }
      }
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    if ((c == '}' || c == ']') && --depth == 0 && value_from != std::string_view::npos)
      return text.substr(value_from, i - value_from);
    if (c == ',' && depth == 1 && value_from != std::string_view::npos)
      return text.substr(value_from, i - value_from);
  }
  return {};
}

// {"name": N, "arguments": {...}} (or "parameters", Llama 3's key; arguments as a JSON string too),
// `text` parsed as `j`. The arguments go out as the model wrote them (so that written back in the
// history they are the same text, and the program's block is reused).
bool read_call(std::string_view text, const json& j, const ChatTools& tools, std::vector<ToolCall>& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"];
  if (std::find(tools.names.begin(), tools.names.end(), name) == tools.names.end()) return false;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  json args = key ? j[key] : json::object();
  if (args.is_string()) {
    args = json::parse(args.get<std::string>(), nullptr, false);
    if (!args.is_object()) return false;
    out.push_back({call_id(), name, j[key].get<std::string>()});
    return true;
  }
  if (!args.is_object()) return false;
  const std::string written = key ? std::string(trim(member_text(text, key))) : std::string();
  out.push_back({call_id(), name, written.empty() ? args.dump() : written});
  return true;
}

bool read_call(const std::string& text, const ChatTools& tools, std::vector<ToolCall>& out) {
  return read_call(text, json::parse(text, nullptr, false), tools, out);
}

// The calls written as <tool_call>...</tool_call>; one left open (the reply was cut) is dropped
// when `cut`, and makes it no calls otherwise.
std::vector<ToolCall> tagged_calls(const std::string& text, size_t first, const ChatTools& tools, bool cut,
                                   std::string* left_open) {
  std::vector<ToolCall> calls;
  for (size_t at = first; at != std::string::npos; at = text.find(kOpen, at)) {
    const size_t body = at + kOpen.size();
    const size_t end = text.find(kClose, body);
    if (end == std::string::npos) {
      if (!cut) return {};
      if (!calls.empty()) *left_open = text.substr(at);
      return calls;
    }
    if (!read_call(std::string(trim(std::string_view(text).substr(body, end - body))), tools, calls))
      return {};
    at = end + kClose.size();  // text after the last call is dropped, as other servers do
  }
  return calls;
}

}  // namespace

ToolReply read_tool_calls(const std::string& text, const ChatTools& tools, bool cut) {
  ToolReply r;
  r.content = text;
  if (!tools.active()) return r;
  std::vector<ToolCall> calls;
  std::string before;
  const std::string body(trim(text));
  if (const size_t at = text.find(kOpen); at != std::string::npos) {
    calls = tagged_calls(text, at, tools, cut, &r.cut);
    before = text.substr(0, at);
  } else if (body.rfind(kMistral, 0) == 0) {
    const json list = json::parse(body.substr(kMistral.size()), nullptr, false);
    if (list.is_array())
      for (const json& c : list)
        if (!read_call(std::string_view(), c, tools, calls)) {  // arguments re-written from the parse
          calls.clear();
          break;
        }
  } else if (!body.empty() && body[0] == '{') {
    read_call(body, tools, calls);
  }
  if (calls.empty()) return r;
  if (!tools.parallel) {
    calls.resize(1);
    r.cut.clear();  // one call is the reply: what came after it is not
  }
  r.calls = std::move(calls);
  r.content = all_space(before) ? std::string() : before;
  return r;
}

std::string describe_tools(const ChatTools& tools) {
  std::string out = "You can call these tools (JSON Schema signatures):\n<tools>\n";
  const json list = json::parse(tools.tools_json, nullptr, false);
  if (list.is_array())
    for (const json& t : list)
      if (t.is_object() && t.contains("function")) out += t["function"].dump() + "\n";
  out +=
      "</tools>\nTo call a tool, reply with <tool_call>\n{\"name\": NAME, \"arguments\": {...}}\n</tool_call>"
      " and nothing after it.";
  return out;
}

std::vector<ChatMessage> calls_as_text(std::vector<ChatMessage> messages) {
  for (ChatMessage& m : messages) {
    if (!m.tool_calls.empty()) {
      const json calls = json::parse(m.tool_calls, nullptr, false);
      if (calls.is_array())
        for (const json& c : calls) {
          // As the grammar spells a call (json_schema.h): the arguments as they came (the model's
          // text, when the client sends back what it got), a JSON string when they do not parse.
          const std::string args = c["function"].value("arguments", "{}");
          const bool parses = !json::parse(args, nullptr, false).is_discarded();
          m.content += std::string(m.content.empty() ? "" : "\n") + std::string(kOpen) +
                       "\n{\"name\": " + json(c["function"].value("name", "")).dump() +
                       ", \"arguments\": " + (parses ? args : json(args).dump()) + "}\n" +
                       std::string(kClose);
        }
      m.tool_calls.clear();
    }
    m.null_content = false;
    if (m.role == "tool") {
      m.role = "user";
      m.content = "<tool_response>\n" + m.content + "\n</tool_response>";
      m.tool_call_id.clear();
      m.name.clear();
    }
  }
  return messages;
}

std::string ToolCallStream::push(const std::string& text) {
  pending_ += text;
  if (holding_) return {};
  if (!started_) {
    const size_t b = pending_.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    const std::string_view head = std::string_view(pending_).substr(b);
    if (head[0] == '{' || head.rfind(kMistral, 0) == 0) {
      holding_ = true;
      return {};
    }
    if (head.size() < kMistral.size() && kMistral.rfind(head, 0) == 0) return {};  // may be [TOOL_CALLS]
    started_ = true;
  }
  if (const size_t at = pending_.find(kOpen); at != std::string::npos) {
    std::string out = pending_.substr(0, at);
    pending_.erase(0, at);
    holding_ = true;
    return out;
  }
  // Keep back a tail that may be the start of "<tool_call>".
  size_t keep = 0;
  for (size_t n = std::min(pending_.size(), kOpen.size() - 1); n > 0; --n)
    if (std::string_view(pending_).substr(pending_.size() - n) == kOpen.substr(0, n)) {
      keep = n;
      break;
    }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

}  // namespace chorus
