// The OpenAI Responses API (docs/serve.md, "Responses"): POST /v1/responses, GET and DELETE
// /v1/responses/{id}. A request is read into the chat request it means (its input items after the
// stored conversation of its previous_response_id), run as one, and its reply written as a
// response object (output items, usage) or its events. A chain of responses is one program: each
// response of a chain runs on the program of the first, so a turn reuses the blocks of the turns
// before it.
#include "gateway/api_requests.h"
#include "gateway/gateway_impl.h"

namespace chorus {
namespace {

using ojson = nlohmann::ordered_json;

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> n{0};
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%llx%06llx", prefix,
                static_cast<unsigned long long>(std::chrono::system_clock::now().time_since_epoch().count() &
                                                0xffffffffffull),
                static_cast<unsigned long long>(++n));
  return buf;
}

}  // namespace

// What a stored response keeps: the object a GET returns, the conversation so far as chat
// messages (its input and output), and the program its chain runs on.
struct Gateway::Impl::StoredResponse {
  json object;
  ojson conversation = ojson::array();
  std::string program;
};

Gateway::Impl::ResponseTurn Gateway::Impl::responses_request(const std::string& body) {
  const ojson j = read_body(body);
  ResponseTurn t;
  t.store = !j.contains("store") || j["store"].is_null() || j["store"].get<bool>();
  if (j.contains("store") && !j["store"].is_null() && !j["store"].is_boolean())
    bad_request("`store` must be a boolean", "store");
  ojson history = ojson::array();
  if (j.contains("previous_response_id") && !j["previous_response_id"].is_null()) {
    if (!j["previous_response_id"].is_string())
      bad_request("`previous_response_id` must be a string", "previous_response_id");
    t.previous = j["previous_response_id"];
    std::lock_guard<std::mutex> l(responses_m);
    auto it = responses.find(t.previous);
    if (it == responses.end())
      throw HttpError{
          404, error_body("no stored response `" + t.previous + "` (store: false, deleted, or never made)",
                          "invalid_request_error", "previous_response_id", "previous_response_not_found")};
    history = it->second->conversation;
    t.program = it->second->program;
  }
  ojson chat = responses_as_chat(j, history);
  t.id = new_id("resp_");
  if (j.contains("program_id"))
    t.program = j["program_id"].is_string() ? j["program_id"].get<std::string>() : "";
  if (t.program.empty() && t.store) t.program = t.id;  // the chain's program: its first response's id
  if (!t.program.empty()) chat["program_id"] = t.program;
  t.req = parse_chat_request(chat.dump(), model_name, opts.default_max_tokens, opts.max_tokens_limit,
                             static_cast<int>(model->tokenizer.vocab_size()));
  t.conversation = chat["messages"];
  if (j.contains("instructions") && !t.conversation.empty() && t.conversation[0]["role"] == "system" &&
      !j["instructions"].is_null())
    t.conversation.erase(t.conversation.begin());  // instructions are not carried to the next response
  t.echo = {{"instructions", j.contains("instructions") ? j["instructions"] : ojson()},
            {"max_output_tokens", j.contains("max_output_tokens") ? j["max_output_tokens"] : ojson()},
            {"parallel_tool_calls", j.value("parallel_tool_calls", true)},
            {"previous_response_id", t.previous.empty() ? ojson() : ojson(t.previous)},
            {"temperature", j.contains("temperature") ? j["temperature"] : ojson(1.0)},
            {"top_p", j.contains("top_p") ? j["top_p"] : ojson(1.0)},
            {"tool_choice", j.contains("tool_choice") ? j["tool_choice"] : ojson("auto")},
            {"tools", j.contains("tools") ? j["tools"] : ojson::array()},
            {"text", j.contains("text") ? j["text"] : ojson({{"format", {{"type", "text"}}}})},
            {"truncation", "disabled"},
            {"metadata", j.contains("metadata") ? j["metadata"] : ojson::object()},
            {"store", t.store}};
  return t;
}

// The response object of a finished turn, and what its output adds to the conversation.
json Gateway::Impl::response_json(const ResponseTurn& t, const Outcome& o, ojson* added) const {
  json output = json::array();
  if (!o.content.empty() || o.calls.empty())
    output.push_back(
        {{"type", "message"},
         {"id", "msg_" + t.id.substr(5)},
         {"status", o.finish_reason == "length" ? "incomplete" : "completed"},
         {"role", "assistant"},
         {"content",
          json::array({{{"type", "output_text"}, {"text", o.content}, {"annotations", json::array()}}})}});
  for (const ToolCall& c : o.calls)
    output.push_back({{"type", "function_call"},
                      {"id", "fc_" + c.id},
                      {"call_id", c.id},
                      {"name", c.name},
                      {"arguments", c.arguments},
                      {"status", "completed"}});
  if (added) {
    ojson turn = {{"role", "assistant"},
                  {"content", o.content.empty() && !o.calls.empty() ? ojson() : ojson(o.content)}};
    if (!o.calls.empty()) turn["tool_calls"] = ojson::parse(tool_calls_json(o.calls, false).dump());
    added->push_back(turn);
  }
  const bool cut = o.finish_reason == "length";
  json r = {{"id", t.id},
            {"object", "response"},
            {"created_at", static_cast<int64_t>(std::time(nullptr))},
            {"status", cut ? "incomplete" : "completed"},
            {"error", nullptr},
            {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
            {"model", model_name},
            {"output", output},
            {"usage",
             {{"input_tokens", o.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
              {"output_tokens", o.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", o.prompt_tokens + o.completion_tokens}}}};
  for (const auto& [k, v] : t.echo.items()) r[k] = json::parse(v.dump());
  return r;
}

void Gateway::Impl::store_response(const ResponseTurn& t, const json& object, const ojson& added) {
  if (!t.store) return;
  auto s = std::make_shared<StoredResponse>();
  s->object = object;
  s->conversation = t.conversation;
  for (const ojson& m : added) s->conversation.push_back(m);
  s->program = t.program;
  std::lock_guard<std::mutex> l(responses_m);
  responses[t.id] = std::move(s);
  response_order.push_back(t.id);
  while (response_order.size() > std::max<size_t>(opts.stored_responses, 1)) {  // the oldest go first
    responses.erase(response_order.front());
    response_order.pop_front();
  }
}

void Gateway::Impl::on_responses(const httplib::Request& hreq, httplib::Response& res) {
  if (const std::string why = backends.unavailable(); !why.empty())
    throw HttpError{503, error_body(why, "server_error", "", "not_leader")};
  ResponseTurn t = responses_request(hreq.body);
  auto [adm, ids] = admit_request(hreq, t.req, "resp-");
  ids.rid = t.id;
  if (t.req.stream) {
    auto turn = std::make_shared<ResponseTurn>(std::move(t));
    return stream_reply(
        std::move(adm), turn->req, std::move(ids), res,
        [this, turn](StreamedTurn& st, httplib::DataSink& sink) { stream_response(*turn, st, sink); });
  }
  const std::vector<Outcome> os{generate_whole(adm, t.req)};
  ojson added = ojson::array();
  const json r = response_json(t, os[0], &added);
  store_response(t, r, added);
  res.set_content(json_text(r), "application/json");
  log_reply(ids.log, adm, t.req, ids, os);
}

// The documented events, each with its sequence_number: response.created, .in_progress, per
// output item its .added, text deltas (or a call's arguments), .done events, response.completed.
void Gateway::Impl::stream_response(ResponseTurn& t, StreamedTurn& st, httplib::DataSink& sink) {
  bool ok = true;
  int64_t seq = 0;
  auto send = [&](const std::string& type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq++;
    const std::string s = "event: " + type + "\ndata: " + json_text(data) + "\n\n";
    ok = ok && sink.write(s.data(), s.size());
    return ok;
  };
  Outcome none;
  json pending = response_json(t, none, nullptr);
  pending["status"] = "in_progress";
  pending["output"] = json::array();
  pending["usage"] = nullptr;
  send("response.created", {{"response", pending}});
  send("response.in_progress", {{"response", pending}});
  const std::string msg_id = "msg_" + t.id.substr(5);
  bool text_open = false;
  auto open_text = [&] {
    if (text_open) return;
    text_open = true;
    send("response.output_item.added", {{"output_index", 0},
                                        {"item",
                                         {{"type", "message"},
                                          {"id", msg_id},
                                          {"status", "in_progress"},
                                          {"role", "assistant"},
                                          {"content", json::array()}}}});
    send("response.content_part.added",
         {{"item_id", msg_id},
          {"output_index", 0},
          {"content_index", 0},
          {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  };
  auto delta = [&](const std::string& piece) {
    if (piece.empty()) return ok;
    open_text();
    return send("response.output_text.delta", {{"item_id", msg_id},
                                               {"output_index", 0},
                                               {"content_index", 0},
                                               {"delta", piece},
                                               {"logprobs", json::array()}});
  };
  const auto run = run_streamed(st, delta, [&](const HttpError& e) {
    const json body = json::parse(e.body, nullptr, false);
    send("error",
         {{"message",
           body.is_object() && body.contains("error") ? body["error"].value("message", e.body) : e.body}});
  });
  if (!run) return sink.done();
  const Outcome& o = *run;
  ojson added = ojson::array();
  const json whole = response_json(t, o, &added);
  size_t index = 0;
  if (o.calls.empty() || !o.content.empty()) {
    open_text();
    const json& item = whole["output"][0];
    send("response.output_text.done", {{"item_id", msg_id},
                                       {"output_index", 0},
                                       {"content_index", 0},
                                       {"text", o.content},
                                       {"logprobs", json::array()}});
    send("response.content_part.done",
         {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0}, {"part", item["content"][0]}});
    send("response.output_item.done", {{"output_index", 0}, {"item", item}});
    index = 1;
  }
  for (; index < whole["output"].size(); ++index) {
    json item = whole["output"][index];
    const std::string args = item["arguments"];
    json open = item;
    open["arguments"] = "";
    open["status"] = "in_progress";
    send("response.output_item.added", {{"output_index", index}, {"item", open}});
    send("response.function_call_arguments.delta",
         {{"item_id", item["id"]}, {"output_index", index}, {"delta", args}});
    send("response.function_call_arguments.done",
         {{"item_id", item["id"]}, {"output_index", index}, {"name", item["name"]}, {"arguments", args}});
    send("response.output_item.done", {{"output_index", index}, {"item", item}});
  }
  store_response(t, whole, added);
  send(whole["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", whole}});
  log_reply(st.ids.log, st.adm, st.req, st.ids, {o});
  sink.done();
}

void Gateway::Impl::on_stored_response(const httplib::Request& q, httplib::Response& res, bool remove) {
  const std::string id = q.matches[1];
  std::lock_guard<std::mutex> l(responses_m);
  auto it = responses.find(id);
  if (it == responses.end())
    throw HttpError{404, error_body("no stored response `" + id + "`", "invalid_request_error", "response_id",
                                    "response_not_found")};
  if (!remove) return res.set_content(json_text(it->second->object), "application/json");
  responses.erase(it);
  std::erase(response_order, id);
  res.set_content(json_text(json{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace chorus
