#include "gateway/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

namespace chorus {

using ojson = nlohmann::ordered_json;  // a request's schemas keep their order (a reply's keys follow it)

// An OpenAI-style error body.
HttpError http_error(const Error& e) {
  switch (e.code) {
    case Errc::out_of_memory: return {503, error_body(e.message, "server_error", "", "kv_cache_full")};
    case Errc::not_found: return {404, error_body(e.message, "invalid_request_error", "", errc_id(e.code))};
    case Errc::invalid_argument:
    case Errc::out_of_range:
    case Errc::unsupported: return {400, error_body(e.message, "invalid_request_error", "", errc_id(e.code))};
    default: return {500, error_body(e.message, "server_error", "", errc_id(e.code))};
  }
}

std::string error_body(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  ojson e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json_text(ojson{{"error", e}});
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

[[noreturn]] void bad_request(const std::string& message, const std::string& param) {
  throw HttpError{400, error_body(message, "invalid_request_error", param)};
}

namespace {

bool is_function_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// An assistant turn's tool_calls, a tool turn's tool_call_id (and name).
void read_turn_tools(const ojson& m, const std::string& where, ChatMessage& msg) {
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    const ojson& calls = m["tool_calls"];
    if (msg.role != "assistant" || !calls.is_array())
      bad_request(where + ".tool_calls: only an assistant turn has tool calls, as an array",
                  where + ".tool_calls");
    for (size_t k = 0; k < calls.size(); ++k) {
      const ojson& c = calls[k];
      const std::string at = where + ".tool_calls[" + std::to_string(k) + "]";
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("name") || !c["function"]["name"].is_string())
        bad_request(at + ".function.name is required", at + ".function.name");
      if (!c["function"].contains("arguments") || !c["function"]["arguments"].is_string())
        bad_request(at + ".function.arguments must be a string (of JSON)", at + ".function.arguments");
      if (c.contains("id") && !c["id"].is_string()) bad_request(at + ".id must be a string", at + ".id");
    }
    msg.tool_calls = calls.dump();
  }
  if (msg.role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
      bad_request(where + ".tool_call_id is required for a tool turn", where + ".tool_call_id");
    msg.tool_call_id = m["tool_call_id"];
  }
  if (m.contains("name") && m["name"].is_string()) msg.name = m["name"];
}

// tools, tool_choice, parallel_tool_calls. "required" and a named function constrain the reply
// to calls whose arguments match the tools' parameters.
void read_tools(const ojson& j, ChatRequest& r) {
  ChatTools& t = r.tools;
  if (j.contains("parallel_tool_calls") && !j["parallel_tool_calls"].is_null()) {
    if (!j["parallel_tool_calls"].is_boolean())
      bad_request("`parallel_tool_calls` must be a boolean", "parallel_tool_calls");
    t.parallel = j["parallel_tool_calls"];
  }
  const bool has_tools = j.contains("tools") && !j["tools"].is_null();
  if (has_tools && !j["tools"].is_array()) bad_request("`tools` must be an array", "tools");
  ojson functions = ojson::array();
  if (has_tools) {
    for (size_t k = 0; k < j["tools"].size(); ++k) {
      const ojson& tool = j["tools"][k];
      const std::string at = "tools[" + std::to_string(k) + "]";
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
          !tool["function"].is_object())
        bad_request(at + " must be {\"type\": \"function\", \"function\": {...}}", at);
      const ojson& f = tool["function"];
      if (!f.contains("name") || !f["name"].is_string() || !is_function_name(f["name"]))
        bad_request(at + ".function.name must be 1 to 64 letters, digits, _ or -", at + ".function.name");
      const std::string name = f["name"];
      if (std::find(t.names.begin(), t.names.end(), name) != t.names.end())
        bad_request("two tools are named `" + name + "`", at + ".function.name");
      t.names.push_back(name);
      ojson fn = {{"name", name}};
      if (f.contains("parameters") && !f["parameters"].is_null()) {
        if (!f["parameters"].is_object())
          bad_request(at + ".function.parameters must be a JSON Schema object", at + ".function.parameters");
        fn["parameters"] = f["parameters"];
        auto g = grammar_of(OutputConstraint::tool_calls_of(ojson::array({fn}).dump()));
        if (!g) bad_request(g.error().message, at + ".function.parameters");
      }
      functions.push_back(std::move(fn));
    }
    if (!t.names.empty()) t.tools_json = j["tools"].dump();
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const ojson& c = j["tool_choice"];
    if (c.is_string()) {
      t.choice = c;
      if (t.choice != "none" && t.choice != "auto" && t.choice != "required")
        bad_request("`tool_choice` must be none, auto, required or {\"type\": \"function\", ...}",
                    "tool_choice");
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      const std::string name = c["function"]["name"];
      const auto it = std::find(t.names.begin(), t.names.end(), name);
      if (it == t.names.end())
        bad_request("`tool_choice` names `" + name + "`, which is not among the tools", "tool_choice");
      t.choice = "function";
      functions = ojson::array({functions[static_cast<size_t>(it - t.names.begin())]});
    } else {
      bad_request(
          "`tool_choice` must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": "
          "...}}",
          "tool_choice");
    }
    if (t.choice != "none" && t.names.empty())
      bad_request("`tool_choice` asks for a call but there are no `tools`", "tool_choice");
  }
  t.functions_json = functions.dump();
  if (!t.constrained()) return;
  if (!r.sampling.constraint.empty())
    bad_request("`response_format` and a required tool call cannot both constrain the reply", "tool_choice");
  ojson spec = {{"tools", functions}, {"required", true}, {"parallel", t.parallel}};
  r.sampling.constraint = OutputConstraint::tool_calls_of(spec.dump());
}

// messages[]: role and content (a string, or text parts); `developer` is a system turn.
void read_messages(const ojson& j, ChatRequest& r) {
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    bad_request("`messages` must be a non-empty array", "messages");
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const ojson& m = j["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_request(where + ".role is required", where);
    const std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      bad_request(where + ".role: unknown role `" + role + "`", where + ".role");
    std::string content;
    if (m.contains("content") && m["content"].is_string()) {
      content = m["content"];
    } else if (m.contains("content") && m["content"].is_array()) {  // [{type: text, text: ...}]
      for (const ojson& part : m["content"]) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad_request(where + ".content: only text parts are supported", where + ".content");
        content += part["text"].get<std::string>();
      }
    } else if (!((!m.contains("content") || m["content"].is_null()) && role == "assistant")) {
      bad_request(where + ".content must be a string or an array of text parts", where + ".content");
    }
    ChatMessage msg{role == "developer" ? "system" : role, content};
    msg.null_content = role == "assistant" && (!m.contains("content") || m["content"].is_null());
    read_turn_tools(m, where, msg);
    r.messages.push_back(std::move(msg));
  }
}

int integer_field(const ojson& j, const char* key, int lo, int hi, int dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number_integer()) bad_request(std::string("`") + key + "` must be an integer", key);
  const int64_t v = j[key];
  if (v < lo || v > hi)
    bad_request(std::string("`") + key + "` must be between " + std::to_string(lo) + " and " +
                    std::to_string(hi) + " (got " + std::to_string(v) + ")",
                key);
  return static_cast<int>(v);
}

double number_field(const ojson& j, const char* key, double lo, double hi, double dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number()) bad_request(std::string("`") + key + "` must be a number", key);
  const double v = j[key];
  if (v < lo || v > hi)
    bad_request(
        std::string("`") + key + "` must be between " + std::to_string(lo) + " and " + std::to_string(hi),
        key);
  return v;
}

// Token ids as a request gives them (logit_bias keys, a prompt): below n_vocab when it is known.
TokenId token_id(int64_t v, int n_vocab, const std::string& param) {
  if (v < 0 || (n_vocab > 0 && v >= n_vocab) || v > INT32_MAX)
    bad_request("`" + param + "`: token id " + std::to_string(v) + " is not in the vocabulary (0 to " +
                    std::to_string(n_vocab - 1) + ")",
                param);
  return static_cast<TokenId>(v);
}

// logit_bias: {"token id": bias in [-100, 100]}.
void read_logit_bias(const ojson& j, int n_vocab, ChatRequest& r) {
  if (!j.contains("logit_bias") || j["logit_bias"].is_null()) return;
  const ojson& b = j["logit_bias"];
  if (!b.is_object()) bad_request("`logit_bias` must be an object of token ids to biases", "logit_bias");
  if (b.size() > 1024) bad_request("`logit_bias` has more than 1024 entries", "logit_bias");
  for (const auto& [k, v] : b.items()) {
    int64_t id = -1;
    if (k.empty() || k.size() > 10 ||
        !std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }))
      bad_request("`logit_bias` keys must be token ids (got \"" + k + "\")", "logit_bias");
    id = std::stoll(k);
    if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100)
      bad_request("`logit_bias` values must be numbers from -100 to 100", "logit_bias");
    r.sampling.logit_bias.emplace_back(token_id(id, n_vocab, "logit_bias"), v.get<float>());
  }
}

// max_tokens, n, temperature, top_p, seed, stop, penalties, logit_bias.
void read_sampling(const ojson& j, int default_max_tokens, int max_tokens_limit, int n_vocab,
                   ChatRequest& r) {
  r.max_tokens = integer_field(j, "max_tokens", 1, max_tokens_limit, default_max_tokens);
  r.max_tokens = integer_field(j, "max_completion_tokens", 1, max_tokens_limit, r.max_tokens);
  r.n = integer_field(j, "n", 1, kMaxChoices, 1);
  r.sampling.temperature = static_cast<float>(number_field(j, "temperature", 0, 2, 1.0));
  r.sampling.top_p = static_cast<float>(number_field(j, "top_p", 0, 1, 1.0));
  r.sampling.top_k = 0;
  r.sampling.min_p = 0;
  r.sampling.seed = static_cast<uint64_t>(integer_field(j, "seed", 0, INT32_MAX, 0));
  r.sampling.presence_penalty = static_cast<float>(number_field(j, "presence_penalty", -2, 2, 0));
  r.sampling.frequency_penalty = static_cast<float>(number_field(j, "frequency_penalty", -2, 2, 0));
  read_logit_bias(j, n_vocab, r);
  if (!j.contains("stop") || j["stop"].is_null()) return;
  if (j["stop"].is_string()) {
    r.stop = {j["stop"].get<std::string>()};
  } else if (j["stop"].is_array() && j["stop"].size() <= 4) {
    for (const ojson& s : j["stop"]) {
      if (!s.is_string() || s.get<std::string>().empty())
        bad_request("`stop` entries must be non-empty strings", "stop");
      r.stop.push_back(s);
    }
  } else {
    bad_request("`stop` must be a string or an array of at most 4 strings", "stop");
  }
}

// Chat: `logprobs` (a boolean) and `top_logprobs` (0 to 20, with logprobs).
void read_chat_logprobs(const ojson& j, ChatRequest& r) {
  bool on = false;
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    if (!j["logprobs"].is_boolean()) bad_request("`logprobs` must be a boolean", "logprobs");
    on = j["logprobs"];
  }
  const int top = integer_field(j, "top_logprobs", 0, kMaxLogprobs, -1);
  if (top >= 0 && !on) bad_request("`top_logprobs` needs `logprobs: true`", "top_logprobs");
  if (on) r.sampling.logprobs = std::max(top, 0);
}

// Fields that do not change the reply, accepted when well-formed (docs/serve.md says so): `store`
// (chorus keeps no stored completions to list; a program keeps its blocks by `program_id`),
// `metadata` (at most 16 string values, as OpenAI's), `service_tier` (one tier here),
// `prompt_cache_key` (reuse follows the program's blocks), `safety_identifier`, and `verbosity`
// at its default, `medium` (another level would change the reply: refused).
void check_harmless(const std::string& k, const ojson& v) {
  auto must = [&](bool ok, const std::string& what) {
    if (!ok) bad_request("`" + k + "` must be " + what, k);
  };
  if (k == "store") return must(v.is_boolean(), "a boolean");
  if (k == "metadata") {
    must(v.is_object() && v.size() <= 16, "an object of at most 16 string values");
    for (const auto& [mk, mv] : v.items())
      must(mv.is_string() && mk.size() <= 64 && mv.get<std::string>().size() <= 512,
           "an object of string values (keys up to 64 characters, values up to 512)");
    return;
  }
  if (k == "service_tier") {
    static const std::set<std::string> tiers = {"auto", "default", "flex", "scale", "priority"};
    return must(v.is_string() && tiers.count(v.get<std::string>()), "auto, default, flex, scale or priority");
  }
  if (k == "prompt_cache_key" || k == "safety_identifier") return must(v.is_string(), "a string");
  if (k == "verbosity")
    return must(v.is_string() && v.get<std::string>() == "medium",
                "`medium` here (the default; another level would change the reply)");
}

// Every top-level field is honoured or refused, none silently ignored: those chorus reads
// (`read`), those that do not change the reply (check_harmless), and those whose value asks for
// nothing (null, empty `functions`).
void check_fields(const ojson& j, const std::set<std::string>& read) {
  static const std::set<std::string> harmless = {
      "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier", "verbosity"};
  for (const auto& [k, v] : j.items()) {
    if (read.count(k) || v.is_null() || (k == "functions" && v.is_array() && v.empty())) continue;
    if (harmless.count(k)) {
      check_harmless(k, v);
      continue;
    }
    bad_request("`" + k + "` is not supported by this server (docs/serve.md lists what is)", k);
  }
}

// Fields both endpoints read.
const std::set<std::string>& common_fields() {
  static const std::set<std::string> f = {"model",
                                          "max_tokens",
                                          "n",
                                          "temperature",
                                          "top_p",
                                          "seed",
                                          "stop",
                                          "stream",
                                          "stream_options",
                                          "program_id",
                                          "extra_body",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "logit_bias",
                                          "logprobs",
                                          "user"};
  return f;
}

// response_format: text (nothing), json_object, or json_schema ({"schema": ..., "name", "strict"}),
// checked here so that a schema chorus cannot follow is a 400 naming its keyword.
void read_response_format(const ojson& j, ChatRequest& r) {
  if (!j.contains("response_format") || j["response_format"].is_null()) return;
  const ojson& f = j["response_format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    bad_request("`response_format` must be an object with a `type`", "response_format");
  const std::string type = f["type"];
  if (type == "text") return;
  if (type == "json_object") {
    r.sampling.constraint = OutputConstraint::any_json_object();
    return;
  }
  if (type != "json_schema")
    bad_request("`response_format.type` must be text, json_object or json_schema", "response_format.type");
  if (!f.contains("json_schema") || !f["json_schema"].is_object())
    bad_request("`response_format.json_schema` must be an object", "response_format.json_schema");
  const ojson& js = f["json_schema"];
  if (js.contains("name") && !js["name"].is_string())
    bad_request("`response_format.json_schema.name` must be a string", "response_format.json_schema.name");
  if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
    bad_request("`response_format.json_schema.strict` must be a boolean",
                "response_format.json_schema.strict");
  if (!js.contains("schema") || !(js["schema"].is_object() || js["schema"].is_boolean()))
    bad_request("`response_format.json_schema.schema` is required (a JSON Schema)",
                "response_format.json_schema.schema");
  r.sampling.constraint = OutputConstraint::json_schema_of(js["schema"].dump());
  if (auto g = grammar_of(r.sampling.constraint); !g)
    bad_request(g.error().message, "response_format.json_schema.schema");
}

// grammar (llama-server's field; the openai client sends it through extra_body): a GBNF grammar
// (engine/grammar/gbnf.h) the reply follows.
void read_grammar(const ojson& j, ChatRequest& r) {
  if (!j.contains("grammar") || j["grammar"].is_null()) return;
  if (!j["grammar"].is_string() || j["grammar"].get<std::string>().empty())
    bad_request("`grammar` must be a GBNF grammar (a string)", "grammar");
  if (!r.sampling.constraint.empty())
    bad_request("`grammar` and `response_format` cannot both constrain the reply", "grammar");
  r.sampling.constraint = OutputConstraint::gbnf_of(j["grammar"]);
  if (auto g = grammar_of(r.sampling.constraint); !g) bad_request(g.error().message, "grammar");
}

// stream, stream_options, and chorus's program_id (top level, or in extra_body).
void read_delivery(const ojson& j, ChatRequest& r) {
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) bad_request("`stream` must be a boolean", "stream");
    r.stream = j["stream"];
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const ojson& so = j["stream_options"];
    if (!so.is_object()) bad_request("`stream_options` must be an object", "stream_options");
    if (so.contains("include_usage") && !so["include_usage"].is_null()) {
      if (!so["include_usage"].is_boolean())
        bad_request("`stream_options.include_usage` must be a boolean", "stream_options.include_usage");
      r.include_usage = so["include_usage"];
    }
  }
  const ojson* pid = nullptr;
  if (j.contains("program_id"))
    pid = &j["program_id"];
  else if (j.contains("extra_body") && j["extra_body"].is_object() && j["extra_body"].contains("program_id"))
    pid = &j["extra_body"]["program_id"];
  if (pid && !pid->is_null()) {
    if (!pid->is_string() || pid->get<std::string>().empty() || pid->get<std::string>().size() > 128)
      bad_request("`program_id` must be a non-empty string of at most 128 characters", "program_id");
    r.program_id = *pid;
  }
}

}  // namespace

namespace {
// The body as a JSON object naming the server's model (or "default"): 400 for what is not JSON
// or not an object, 404 model_not_found for another model.
ojson read_body(const std::string& body, const std::string& model_name) {
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const ojson::exception& e) {
    bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad_request("the body must be a JSON object");
  if (!j.contains("model") || !j["model"].is_string()) bad_request("`model` is required (a string)", "model");
  const std::string model_id = j["model"];
  if (model_id != model_name && model_id != "default")
    throw HttpError{
        404, error_body("The model `" + model_id + "` does not exist (this server has `" + model_name + "`)",
                        "invalid_request_error", "model", "model_not_found")};
  return j;
}
}  // namespace

ChatRequest parse_chat_request(const std::string& body, const std::string& model_name, int default_max_tokens,
                               int max_tokens_limit, int n_vocab) {
  const ojson j = read_body(body, model_name);
  ChatRequest r;
  static const std::set<std::string> chat_fields = [] {
    std::set<std::string> f = common_fields();
    f.insert({"messages", "max_completion_tokens", "top_logprobs", "response_format", "grammar", "tools",
              "tool_choice", "parallel_tool_calls"});
    return f;
  }();
  check_fields(j, chat_fields);
  read_messages(j, r);
  read_sampling(j, default_max_tokens, max_tokens_limit, n_vocab, r);
  read_chat_logprobs(j, r);
  read_delivery(j, r);
  read_response_format(j, r);
  read_grammar(j, r);
  read_tools(j, r);
  return r;
}

namespace {

// prompt: a string, or token ids; an array of one of them is the same (several prompts in one
// request are refused: send one request each).
void read_prompt(const ojson& j, int n_vocab, ChatRequest& r) {
  if (!j.contains("prompt") || j["prompt"].is_null())
    bad_request("`prompt` is required (a string or an array of token ids)", "prompt");
  const ojson* p = &j["prompt"];
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = *p;
    return;
  }
  if (p->is_array() && !p->empty() &&
      std::all_of(p->begin(), p->end(), [](const ojson& t) { return t.is_number_integer(); })) {
    for (const ojson& t : *p) r.prompt_ids.push_back(token_id(t.get<int64_t>(), n_vocab, "prompt"));
    return;
  }
  if (p->is_array() && p->size() > 1 &&
      std::all_of(p->begin(), p->end(), [](const ojson& t) { return t.is_string() || t.is_array(); }))
    bad_request("`prompt` holds " + std::to_string(p->size()) +
                    " prompts: this server takes one prompt per request (send several requests)",
                "prompt");
  bad_request("`prompt` must be a string, an array of token ids, or an array of one of them", "prompt");
}

}  // namespace

ChatRequest parse_completion_request(const std::string& body, const std::string& model_name,
                                     int max_tokens_limit, int n_vocab) {
  const ojson j = read_body(body, model_name);
  static const std::set<std::string> completion_fields = [] {
    std::set<std::string> f = common_fields();
    f.insert({"prompt", "echo", "suffix", "best_of", "grammar"});
    return f;
  }();
  check_fields(j, completion_fields);
  ChatRequest r;
  r.completion = true;
  read_prompt(j, n_vocab, r);
  read_sampling(j, 16, max_tokens_limit, n_vocab, r);
  r.sampling.logprobs = integer_field(j, "logprobs", 0, kMaxLogprobs, -1);
  if (j.contains("echo") && !j["echo"].is_null()) {
    if (!j["echo"].is_boolean()) bad_request("`echo` must be a boolean", "echo");
    r.echo = j["echo"];
  }
  if (r.echo && r.sampling.logprobs >= 0)
    bad_request("`echo` with `logprobs` asks for the prompt's logprobs, which this server does not compute",
                "echo");
  if (j.contains("suffix") && !j["suffix"].is_null() &&
      !(j["suffix"].is_string() && j["suffix"].get<std::string>().empty()))
    bad_request("`suffix` (fill in the middle) is not supported by this server", "suffix");
  if (integer_field(j, "best_of", 1, kMaxChoices, r.n) != r.n)
    bad_request("`best_of` other than `n` is not supported by this server", "best_of");
  read_grammar(j, r);
  read_delivery(j, r);
  return r;
}

}  // namespace chorus
