// The Anthropic Messages API (docs/serve.md, "Anthropic Messages"): POST /v1/messages and
// /v1/messages/count_tokens. A request is read into the chat request it means (the same checks,
// the same tools grammar, the same programs), run as one, and its reply written in Anthropic's
// shape: content blocks, stop_reason, usage, and its server-sent events when streamed.
#include "gateway/api_requests.h"
#include "gateway/gateway_impl.h"

namespace chorus {
namespace {

using ojson = nlohmann::ordered_json;

// Anthropic's error `type` for an HTTP status.
const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
  }
}

std::string stop_reason(const std::string& finish) {
  return finish == "length" ? "max_tokens" : finish == "tool_calls" ? "tool_use" : "end_turn";
}

}  // namespace

// An OpenAI-shaped error body (http_error, the chat parser's refusals) in Anthropic's shape.
std::string Gateway::Impl::anthropic_error(const HttpError& e) {
  const json body = json::parse(e.body, nullptr, false);
  const std::string message = body.is_object() && body.contains("error") && body["error"].contains("message")
                                  ? body["error"]["message"].get<std::string>()
                                  : e.body;
  return json{{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", message}}}}.dump();
}

ChatRequest Gateway::Impl::messages_request(const std::string& body) const {
  const ojson j = read_body(body);
  ChatRequest req =
      parse_chat_request(messages_as_chat(j).dump(), model_name, opts.default_max_tokens,
                         opts.max_tokens_limit, static_cast<int>(model->tokenizer.vocab_size()));
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    if (!j["top_k"].is_number_integer() || j["top_k"].get<int64_t>() < 0 || j["top_k"].get<int64_t>() > 1000)
      bad_request("`top_k` must be an integer from 0 to 1000");
    req.sampling.top_k = static_cast<int>(j["top_k"].get<int64_t>());
  }
  return req;
}

json Gateway::Impl::message_json(const ChatRequest& req, const std::string& id, const Outcome& o) const {
  json content = json::array();
  if (!o.content.empty()) content.push_back({{"type", "text"}, {"text", o.content}});
  for (const ToolCall& c : o.calls) {
    json input = json::parse(c.arguments, nullptr, false);
    content.push_back({{"type", "tool_use"},
                       {"id", c.id},
                       {"name", c.name},
                       {"input", input.is_object() ? input : json::object()}});
  }
  json stop = nullptr;  // the stop sequence that ended it, when one did
  if (o.finish_reason == "stop" && !o.eog)
    for (const std::string& s : req.stop)
      if (o.raw.find(s) != std::string::npos) stop = s;
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_name},
          {"content", content},
          {"stop_reason", stop.is_null() ? stop_reason(o.finish_reason) : "stop_sequence"},
          {"stop_sequence", stop},
          {"usage",
           {{"input_tokens", o.prompt_tokens},
            {"output_tokens", o.completion_tokens},
            {"cache_read_input_tokens", o.cached_tokens},
            {"cache_creation_input_tokens", 0}}}};
}

void Gateway::Impl::on_messages(const httplib::Request& hreq, httplib::Response& res) {
  try {
    if (const std::string why = backends.unavailable(); !why.empty())
      throw HttpError{503, error_body(why, "server_error", "", "not_leader")};
    const ChatRequest req = messages_request(hreq.body);
    auto [adm, ids] = admit_request(hreq, req, "msg_");
    if (req.stream)
      return stream_reply(std::move(adm), req, std::move(ids), res,
                          [this](StreamedTurn& t, httplib::DataSink& sink) { stream_messages(t, sink); });
    const std::vector<Outcome> os{generate_whole(adm, req)};
    res.set_content(message_json(req, ids.rid, os[0]).dump(), "application/json");
    log_reply(ids.log, adm, req, ids, os);
  } catch (const HttpError& e) {
    res.status = e.status;
    res.set_content(anthropic_error(e), "application/json");
  }
}

Gateway::Impl::Outcome Gateway::Impl::generate_whole(Admitted& adm, const ChatRequest& req) {
  const OnText quiet = [](const std::string&, const Outcome&) { return true; };
  Outcome o;
  try {
    o = generate(adm, req, quiet);
  } catch (...) {
    adm.backend->programs->end(adm.turn.id);
    throw;
  }
  adm.backend->programs->end(adm.turn.id);
  if (!o.error.empty()) throw o.failure();
  return o;
}

std::optional<Gateway::Impl::Outcome> Gateway::Impl::run_streamed(
    StreamedTurn& t, const std::function<bool(const std::string&)>& out,
    const std::function<void(const HttpError&)>& failed) {
  ToolCallStream calls;
  const OnText on_text = [&](const std::string& piece, const Outcome&) {
    return out(t.req.tools.active() ? calls.push(piece) : piece);
  };
  Outcome o;
  try {
    o = generate(t.adm, t.req, on_text);
  } catch (const HttpError& e) {
    t.end->end();
    failed(e);
    return std::nullopt;
  }
  t.end->end();
  if (!o.error.empty()) {
    failed(o.failure());
    return std::nullopt;
  }
  if (o.calls.empty()) out(calls.held());
  return o;
}

// Anthropic's events: message_start, a text block's start, deltas and stop as the text goes out
// (held while it may be a tool call), a tool_use block per call, message_delta, message_stop.
void Gateway::Impl::stream_messages(StreamedTurn& t, httplib::DataSink& sink) {
  bool ok = true;
  auto send = [&](const char* event, const json& data) {
    const std::string s = std::string("event: ") + event + "\ndata: " + data.dump() + "\n\n";
    ok = ok && sink.write(s.data(), s.size());
    return ok;
  };
  Outcome empty;
  json start = message_json(t.req, t.ids.rid, empty);
  start["content"] = json::array();
  start["stop_reason"] = nullptr;
  start["usage"]["output_tokens"] = 0;
  send("message_start", {{"type", "message_start"}, {"message", start}});
  int blocks = 0;
  bool text_open = false;
  auto text = [&](const std::string& piece) {
    if (piece.empty()) return ok;
    if (!text_open) {
      send("content_block_start", {{"type", "content_block_start"},
                                   {"index", blocks},
                                   {"content_block", {{"type", "text"}, {"text", ""}}}});
      text_open = true;
    }
    return send("content_block_delta", {{"type", "content_block_delta"},
                                        {"index", blocks},
                                        {"delta", {{"type", "text_delta"}, {"text", piece}}}});
  };
  const auto run =
      run_streamed(t, text, [&](const HttpError& e) { send("error", json::parse(anthropic_error(e))); });
  if (!run) return sink.done();
  const Outcome& o = *run;
  if (text_open) send("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks++}});
  for (const ToolCall& c : o.calls) {
    send("content_block_start",
         {{"type", "content_block_start"},
          {"index", blocks},
          {"content_block",
           {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}}}});
    send("content_block_delta", {{"type", "content_block_delta"},
                                 {"index", blocks},
                                 {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
    send("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks++}});
  }
  const json whole = message_json(t.req, t.ids.rid, o);
  send("message_delta",
       {{"type", "message_delta"},
        {"delta", {{"stop_reason", whole["stop_reason"]}, {"stop_sequence", whole["stop_sequence"]}}},
        {"usage", {{"output_tokens", o.completion_tokens}}}});
  send("message_stop", {{"type", "message_stop"}});
  log_reply(t.ids.log, t.adm, t.req, t.ids, {o});
  sink.done();
}

// POST /v1/messages/count_tokens: the prompt's tokens as the request would be run.
void Gateway::Impl::on_count_tokens(const httplib::Request& hreq, httplib::Response& res) {
  try {
    ojson j = ojson::parse(hreq.body, nullptr, false);
    if (j.is_object() && !j.contains("max_tokens")) j["max_tokens"] = 1;  // (count_tokens takes none)
    const ChatRequest req = messages_request(j.is_discarded() ? hreq.body : j.dump());
    auto prompt = render_prompt(req);
    if (!prompt) throw http_error(prompt.error());
    const size_t n = model->tokenizer.encode(*prompt, {.parse_special = true}).size();
    res.set_content(json{{"input_tokens", n}}.dump(), "application/json");
  } catch (const HttpError& e) {
    res.status = e.status;
    res.set_content(anthropic_error(e), "application/json");
  }
}

}  // namespace chorus
