// The Anthropic Messages and OpenAI Responses requests read into the chat completion request they
// mean (gateway/api_requests.h).
#include "gateway/api_requests.h"

#include <set>

#include "gateway/openai_request.h"

namespace chorus {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void refuse(const std::string& message) {
  throw HttpError{400, error_body(message, "invalid_request_error")};
}

// The text of a `system` or message content: a string, or a list of text blocks.
std::string text_of(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) refuse("`" + where + "` must be a string or a list of text blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& b = content[i];
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
      refuse("`" + where + "[" + std::to_string(i) +
             "]` must be a text block ({\"type\": \"text\", \"text\": ...})");
    text += b["text"].get<std::string>();
  }
  return text;
}

// One message's content blocks as chat messages: a user's tool results (each a `tool` message)
// before its text; an assistant's text and its tool_use blocks (one message with tool_calls).
void read_message(const ojson& m, size_t i, ojson& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
    refuse("`" + where + "` must be an object with a `role` and a `content`");
  const std::string role = m["role"];
  if (role != "user" && role != "assistant") refuse("`" + where + ".role` must be user or assistant");
  const ojson& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) refuse("`" + where + ".content` must be a string or a list of blocks");
  std::string text;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& b = content[k];
    const std::string at = where + ".content[" + std::to_string(k) + "]";
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string())
        refuse("`" + at + "`: a tool_use block has an `id` and a `name`");
      const ojson input = b.contains("input") ? b["input"] : ojson::object();
      if (!input.is_object()) refuse("`" + at + ".input` must be an object");
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        refuse("`" + at + "`: a tool_result block names its `tool_use_id`");
      std::string result = b.contains("content") ? text_of(b["content"], at + ".content") : "";
      if (b.value("is_error", false)) result = "error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if (type == "image" || type == "document") {
      refuse("`" + at + "`: " + type +
             " blocks are not supported by this server (text, tool_use and tool_result are)");
    } else {
      refuse("`" + at + "`: a " + (type.empty() ? std::string("block without a type") : type + " block") +
             " is not supported here (" + role + " messages take text" +
             (role == "user" ? " and tool_result" : " and tool_use") + " blocks)");
    }
  }
  if (role == "assistant") {
    ojson msg = {{"role", "assistant"}, {"content", text.empty() && !calls.empty() ? ojson() : ojson(text)}};
    if (!calls.empty()) msg["tool_calls"] = calls;
    out.push_back(msg);
  } else if (!text.empty() || content.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

// The text of an input message's content: a string, or input_text / output_text parts.
std::string input_text_of(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request("`" + where + "` must be a string or a list of text parts", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& p = content[i];
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if ((type != "input_text" && type != "output_text") || !p.contains("text") || !p["text"].is_string())
      bad_request("`" + where + "[" + std::to_string(i) +
                      "]`: " + (type.empty() ? std::string("a part without a type") : "a " + type + " part") +
                      " is not supported (input_text and output_text are)",
                  where);
    text += p["text"].get<std::string>();
  }
  return text;
}

// Input items as chat messages: messages, function calls (consecutive ones: one assistant turn)
// and their outputs (tool turns).
void read_items(const ojson& input, ojson& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) bad_request("`input` must be a string or a list of items", "input");
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& it = input[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) bad_request("`" + at + "` must be an object", at);
    const std::string type = it.value("type", it.contains("role") ? "message" : "");
    if (type == "message") {
      const std::string role = it.value("role", "");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        bad_request("`" + at + ".role` must be user, assistant, system or developer", at + ".role");
      if (!it.contains("content")) bad_request("`" + at + "` has no `content`", at);
      out.push_back({{"role", role}, {"content", input_text_of(it["content"], at + ".content")}});
    } else if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"})
        if (!it.contains(k) || !it[k].is_string())
          bad_request("`" + at + "." + k + "` must be a string", at + "." + k);
      const ojson call = {{"id", it["call_id"]},
                          {"type", "function"},
                          {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}};
      if (!out.empty() && out.back()["role"] == "assistant" && out.back().contains("tool_calls"))
        out.back()["tool_calls"].push_back(call);
      else
        out.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({call})}});
    } else if (type == "function_call_output") {
      if (!it.contains("call_id") || !it["call_id"].is_string())
        bad_request("`" + at + ".call_id` must be a string", at + ".call_id");
      const std::string output = it.contains("output") ? input_text_of(it["output"], at + ".output") : "";
      out.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", output}});
    } else {
      bad_request("`" + at +
                      "`: " + (type.empty() ? std::string("an item without a type") : "a " + type + " item") +
                      " is not supported (message, function_call and function_call_output are)",
                  at + ".type");
    }
  }
}

}  // namespace

ojson read_body(const std::string& body) {
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const nlohmann::json::exception& e) {
    bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad_request("the body must be a JSON object");
  return j;
}

// The chat completion body a Messages request means (for parse_chat_request, which checks it).
ojson messages_as_chat(const ojson& j) {
  static const std::set<std::string> known = {
      "model",       "max_tokens", "messages", "system",   "tools",  "tool_choice", "stop_sequences",
      "temperature", "top_p",      "top_k",    "metadata", "stream", "program_id",  "service_tier"};
  for (const auto& [k, v] : j.items())
    if (!known.count(k) && !v.is_null())
      refuse("`" + k + "` is not supported by this server (docs/serve.md lists what is)");
  if (!j.contains("max_tokens")) refuse("`max_tokens` is required");
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    refuse("`messages` is required: a non-empty list");
  ojson c = {{"model", j.contains("model") ? j["model"] : ojson("default")}, {"max_tokens", j["max_tokens"]}};
  ojson messages = ojson::array();
  if (j.contains("system") && !j["system"].is_null())
    messages.push_back({{"role", "system"}, {"content", text_of(j["system"], "system")}});
  for (size_t i = 0; i < j["messages"].size(); ++i) read_message(j["messages"][i], i, messages);
  c["messages"] = messages;
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) refuse("`tools` must be a list");
    ojson tools = ojson::array();
    for (size_t i = 0; i < j["tools"].size(); ++i) {
      const ojson& t = j["tools"][i];
      if (!t.is_object() || !t.contains("name") || !t.contains("input_schema"))
        refuse("`tools[" + std::to_string(i) + "]` must have a `name` and an `input_schema`");
      ojson fn = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    c["tools"] = tools;
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const ojson& tc = j["tool_choice"];
    const std::string type = tc.is_object() ? tc.value("type", "") : "";
    if (type == "auto")
      c["tool_choice"] = "auto";
    else if (type == "any")
      c["tool_choice"] = "required";
    else if (type == "none")
      c["tool_choice"] = "none";
    else if (type == "tool" && tc.contains("name"))
      c["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    else
      refuse("`tool_choice` must be {\"type\": auto, any, tool (with its name) or none}");
    if (tc.contains("disable_parallel_tool_use")) {
      if (!tc["disable_parallel_tool_use"].is_boolean())
        refuse("`tool_choice.disable_parallel_tool_use` must be a boolean");
      c["parallel_tool_calls"] = !tc["disable_parallel_tool_use"].get<bool>();
    }
  }
  if (j.contains("stop_sequences")) c["stop"] = j["stop_sequences"];
  for (const char* k : {"temperature", "top_p", "stream", "program_id", "metadata"})
    if (j.contains(k)) c[k] = j[k];
  if (j.contains("service_tier") && !(j["service_tier"] == "auto" || j["service_tier"] == "standard_only"))
    refuse("`service_tier` must be auto or standard_only");
  return c;
}

// The chat completion body a Responses request means, after `history` (the chat messages of its
// previous response's conversation).
ojson responses_as_chat(const ojson& j, const ojson& history) {
  static const std::set<std::string> known = {"model",
                                              "input",
                                              "instructions",
                                              "tools",
                                              "tool_choice",
                                              "parallel_tool_calls",
                                              "text",
                                              "temperature",
                                              "top_p",
                                              "stream",
                                              "store",
                                              "previous_response_id",
                                              "user",
                                              "metadata",
                                              "truncation",
                                              "service_tier",
                                              "prompt_cache_key",
                                              "safety_identifier",
                                              "include",
                                              "max_output_tokens",
                                              "program_id"};
  for (const auto& [k, v] : j.items())
    if (!known.count(k) && !v.is_null())
      bad_request("`" + k + "` is not supported by this server (docs/serve.md lists what is)", k);
  if (j.contains("truncation") && !j["truncation"].is_null() && j["truncation"] != "disabled")
    bad_request("`truncation` must be disabled here (a conversation longer than the context is a 400)",
                "truncation");
  if (j.contains("include") && !(j["include"].is_null() || (j["include"].is_array() && j["include"].empty())))
    bad_request("`include` is not supported by this server (nothing more can be included)", "include");
  if (!j.contains("input")) bad_request("`input` is required", "input");
  ojson c = {{"model", j.contains("model") ? j["model"] : ojson("default")}};
  ojson messages = ojson::array();
  if (j.contains("instructions") && !j["instructions"].is_null()) {
    if (!j["instructions"].is_string()) bad_request("`instructions` must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", j["instructions"]}});
  }
  for (const ojson& m : history) messages.push_back(m);
  read_items(j["input"], messages);
  c["messages"] = messages;
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) bad_request("`tools` must be a list", "tools");
    ojson tools = ojson::array();
    for (size_t i = 0; i < j["tools"].size(); ++i) {
      const ojson& t = j["tools"][i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function")
        bad_request("`" + at + "`: only function tools are supported", at + ".type");
      ojson fn = {{"name", t.value("name", "")}};
      if (t.contains("description")) fn["description"] = t["description"];
      if (t.contains("parameters")) fn["parameters"] = t["parameters"];
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    c["tools"] = tools;
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const ojson& tc = j["tool_choice"];
    if (tc.is_object() && tc.value("type", "") == "function" && tc.contains("name"))
      c["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    else
      c["tool_choice"] = tc;
  }
  if (j.contains("text") && !j["text"].is_null()) {
    const ojson& t = j["text"];
    if (!t.is_object()) bad_request("`text` must be an object", "text");
    for (const auto& [k, v] : t.items())
      if (k != "format" && !(k == "verbosity" && v == "medium"))
        bad_request("`text." + k + "` is not supported", "text." + k);
    if (t.contains("format") && !t["format"].is_null()) {
      const ojson& f = t["format"];
      const std::string type = f.is_object() ? f.value("type", "") : "";
      if (type == "json_schema") {
        ojson js = {{"name", f.value("name", "response")}};
        if (f.contains("schema")) js["schema"] = f["schema"];
        if (f.contains("strict")) js["strict"] = f["strict"];
        c["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else if (type == "json_object" || type == "text") {
        c["response_format"] = {{"type", type}};
      } else {
        bad_request("`text.format.type` must be text, json_object or json_schema", "text.format.type");
      }
    }
  }
  if (j.contains("max_output_tokens")) c["max_tokens"] = j["max_output_tokens"];
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls", "user", "metadata",
                        "service_tier", "prompt_cache_key", "safety_identifier"})
    if (j.contains(k)) c[k] = j[k];
  return c;
}

}  // namespace chorus
