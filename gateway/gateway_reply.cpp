// Gateway::Impl's generation and replies (gateway/gateway_impl.h): a request's choices run and
// read as they come, a turn going on on another node when its node is lost, whole replies and
// server-sent events, the access log and the trace.
#include "gateway/gateway_impl.h"

namespace chorus {

bool Gateway::Impl::receive(caf::scoped_actor& self, Outcome& out, StopStrings& stops,
                            const std::function<void(const std::string&)>& emit) const {
  bool finished = false, lost = false;
  while (!finished) {
    self->receive([&](event_atom, const std::vector<uint8_t>& f) {
      auto e = decode_reply(f);
      if (!e) return;
      if (e->kind == ReplyKind::token) {
        const bool end = e->token >= 0 && model->tokenizer.is_end_of_generation(e->token);
        if (e->token >= 0) out.ids.push_back(e->token);
        if (e->token >= 0 && out.first_token == Clock::time_point{}) out.first_token = Clock::now();
        if (end) out.eog = true;
        if (!end && !e->logprobs.empty()) out.logprobs.push_back(std::move(e->logprobs));
        out.raw += e->text;
        const std::string ready = stops.push(e->text);
        out.content += ready;
        emit(ready);
      } else if (e->kind == ReplyKind::finished) {
        finished = true;
        lost = e->node_lost;
        if (e->reason == FinishReason::error) out.error = e->text;
        // The pool ran out under the request (the policy counts each request's room, so this
        // takes pages it did not foresee): an error the client can retry, not a short "length".
        if (e->reason == FinishReason::context_full) {
          out.error = e->text;
          out.code = Errc::out_of_memory;
        }
        out.finish_reason = e->reason == FinishReason::max_tokens ? "length" : "stop";
      }
    });
  }
  return lost;
}

void Gateway::Impl::close(Outcome& out, const ChatRequest& req, StopStrings& stops,
                          const std::function<void(const std::string&)>& emit) const {
  out.completion_tokens = static_cast<int64_t>(out.ids.size());
  const std::string tail = stops.flush();  // no stop string after all
  emit(tail);
  out.content += tail;
  const bool cut = out.finish_reason == "length" && req.tools.constrained();
  if (req.tools.active() && (out.finish_reason == "stop" || cut)) {
    ToolReply reply = read_tool_calls(out.content, req.tools, cut);
    if (!reply.calls.empty()) {
      out.content = std::move(reply.content);
      out.calls = std::move(reply.calls);
      // A call cut off after complete ones: those are the reply's calls, and the client sees the
      // cut (finish_reason length, its text in cut_tool_call), not a whole reply.
      out.finish_reason = reply.cut.empty() ? "tool_calls" : "length";
      out.cut_call = std::move(reply.cut);
    }
  }
}

Gateway::Impl::Outcome Gateway::Impl::generate(Admitted& a, const ChatRequest& req, const OnText& on_text) {
  Outcome out;
  const int64_t have_tokens = a.plan.have_tokens;  // of the first attempt: what the client is told
  out.cached_tokens = have_tokens;
  out.prompt_tokens = have_tokens + static_cast<int64_t>(a.plan.toks.size());
  bool client_gone = false;
  StopStrings stops(req.stop);
  auto emit = [&](const std::string& text) {
    if (client_gone || text.empty()) return;
    if (!on_text(text, out)) client_gone = true;
  };
  int64_t before = 0;  // tokens generated before the last attempt
  for (int attempt = 0;; ++attempt) {
    before = static_cast<int64_t>(out.ids.size());
    const bool lost = receive(*a.self, out, stops, emit);
    a.backend->programs->count(attempt == 0 ? static_cast<int64_t>(a.plan.toks.size()) : 0,
                               static_cast<int64_t>(out.ids.size()) - before, attempt == 0 ? have_tokens : 0,
                               attempt == 0 ? 0 : static_cast<int64_t>(a.plan.toks.size()));
    if (!lost || req.n > 1 || attempt >= 3 || static_cast<int>(out.ids.size()) >= req.max_tokens || out.eog)
      break;
    if (!resume(a, req, out.ids)) break;  // out.error stays: no node to go on on
    out.error.clear();
  }
  close(out, req, stops, emit);
  // The last attempt's block: what it found, its prompt (and the tokens of earlier attempts), what it made.
  const int64_t in_block =
      a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) + out.completion_tokens - before;
  // After an error, or with a prompt of token ids, the block's text is not known: empty text
  // makes the next request start it again.
  a.backend->programs->set_contents(
      a.turn.id,
      out.error.empty() && a.plan.known
          ? a.plan.prompt + out.raw +
                (out.eog ? std::string(model->tokenizer.token_text(out.ids.back())) : "")
          : "",
      in_block);
  return out;
}

Gateway::Impl::Outcome Gateway::Impl::generate_fork(Admitted& a, const ChatRequest& req, int i,
                                                    const OnText& on_text) {
  Outcome out;
  out.prompt_tokens = a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size());
  out.cached_tokens = a.plan.have_tokens;
  bool client_gone = false;
  StopStrings stops(req.stop);
  auto emit = [&](const std::string& text) {
    if (client_gone || text.empty()) return;
    if (!on_text(text, out)) client_gone = true;
  };
  if (receive(*a.forks[static_cast<size_t>(i - 1)].self, out, stops, emit) && out.error.empty())
    out.error = "the node went away";
  a.backend->programs->count(0, static_cast<int64_t>(out.ids.size()), 0, 0);
  close(out, req, stops, emit);
  return out;
}

bool Gateway::Impl::resume(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& ids) {
  a.backend->lost = true;
  spdlog::warn(
      "gateway: the node `{}` under program `{}` was lost after {} tokens: the turn goes on elsewhere",
      a.backend->name, a.turn.id, ids.size());
  a.backend->programs->set_contents(a.turn.id, "", 1);
  if (!a.end) a.backend->programs->end(a.turn.id);
  try {
    Admitted next = acquire(req, ids);
    next.end = a.end;
    if (next.end) {
      next.end->end();  // the old turn
      next.end->rebind(next.backend->programs, next.turn.id);
    }
    a = std::move(next);
    return true;
  } catch (const HttpError&) {
    return false;
  }
}

json Gateway::Impl::choice_json(const ChatRequest& req, const Outcome& o, size_t index,
                                const std::string& echo) const {
  const bool lp = req.sampling.logprobs >= 0;
  if (req.completion) {
    int64_t offset = static_cast<int64_t>(echo.size());
    return {{"index", index},
            {"text", echo + o.content},
            {"logprobs", lp ? legacy_logprobs(model->tokenizer, o.logprobs, 0, o.logprobs.size(), offset)
                            : json(nullptr)},
            {"finish_reason", o.finish_reason}};
  }
  json message = {{"role", "assistant"}, {"content", o.content}};
  if (!o.calls.empty()) {
    if (o.content.empty()) message["content"] = nullptr;
    message["tool_calls"] = tool_calls_json(o.calls, false);
  }
  json choice = {
      {"index", index},
      {"message", message},
      {"logprobs", lp ? chat_logprobs(model->tokenizer, o.logprobs, 0, o.logprobs.size()) : json(nullptr)},
      {"finish_reason", o.finish_reason}};
  if (!o.cut_call.empty()) choice["cut_tool_call"] = o.cut_call;
  return choice;
}

json Gateway::Impl::usage_json(const std::vector<Outcome>& os) {
  int64_t completion = 0;
  for (const Outcome& o : os) completion += o.completion_tokens;
  const Outcome& o = os.front();
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", o.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

json Gateway::Impl::completion_json(const ChatRequest& req, const std::string& rid, const std::string& id,
                                    const std::vector<Outcome>& os, bool ephemeral,
                                    const std::string& echo) const {
  json choices = json::array();
  for (size_t i = 0; i < os.size(); ++i) choices.push_back(choice_json(req, os[i], i, echo));
  json r = {{"id", rid},
            {"object", req.completion ? "text_completion" : "chat.completion"},
            {"created", static_cast<int64_t>(std::time(nullptr))},
            {"model", model_name},
            {"choices", std::move(choices)},
            {"usage", usage_json(os)}};
  if (!ephemeral) r["program_id"] = id;
  return r;
}

std::string Gateway::Impl::echo_text(const ChatRequest& req) const {
  if (!req.echo) return "";
  return req.prompt_ids.empty() ? req.prompt_text : model->tokenizer.decode(req.prompt_ids);
}

void Gateway::Impl::log_reply(AccessRecord rec, const Admitted& adm, const ChatRequest& req,
                              const ReplyIds& ids, const std::vector<Outcome>& os) const {
  rec.reply_id = ids.rid;
  rec.program = ids.ephemeral ? "" : adm.turn.id;
  if (adm.backend->name != "local") rec.backend = adm.backend->name;  // a coordinator's node
  rec.streamed = req.stream;
  for (const Outcome& o : os) {
    rec.completion_tokens += o.completion_tokens;
    rec.finish += (rec.finish.empty() ? "" : ",") + (o.error.empty() ? o.finish_reason : "error");
    if (o.first_token != Clock::time_point{} &&
        (rec.first_token == Clock::time_point{} || o.first_token < rec.first_token))
      rec.first_token = o.first_token;
  }
  if (!os.empty()) rec.prompt_tokens = os[0].prompt_tokens, rec.cached_tokens = os[0].cached_tokens;
  rec.done = Clock::now();
  log_access(rec);
  if (opts.trace) trace_request(rec);
}

void Gateway::Impl::trace_request(const AccessRecord& rec) const {
  static std::atomic<int64_t> n{0};
  const int64_t id = ++n;
  Trace& t = *opts.trace;
  auto since = [&](Clock::time_point at) {
    return at == Clock::time_point{}
               ? std::string("null")
               : std::to_string(std::chrono::duration<double>(at - rec.arrived).count());
  };
  const std::string name = rec.method + " " + rec.path;
  t.async_begin("http", name, id, t.us_at(rec.arrived),
                "{\"reply\":" + Trace::quote(rec.reply_id) + ",\"program\":" + Trace::quote(rec.program) +
                    ",\"node\":" + Trace::quote(rec.backend) + "}",
                Trace::kGatewayPid);
  t.async_end("http", name, id, t.us_at(rec.done),
              "{\"status\":" + std::to_string(rec.status) +
                  ",\"prompt_tokens\":" + std::to_string(rec.prompt_tokens) +
                  ",\"cached_tokens\":" + std::to_string(rec.cached_tokens) +
                  ",\"completion_tokens\":" + std::to_string(rec.completion_tokens) +
                  ",\"finish\":" + Trace::quote(rec.finish) + ",\"admitted_s\":" + since(rec.admitted) +
                  ",\"first_token_s\":" + since(rec.first_token) + "}",
              Trace::kGatewayPid);
}

void Gateway::Impl::on_generate(const httplib::Request& hreq, httplib::Response& res, bool completion) {
  if (const std::string why = backends.unavailable(); !why.empty())
    throw HttpError{503, error_body(why, "server_error", "", "not_leader")};
  const int n_vocab = static_cast<int>(model->tokenizer.vocab_size());
  const ChatRequest req =
      completion ? parse_completion_request(hreq.body, model_name, opts.max_tokens_limit, n_vocab)
                 : parse_chat_request(hreq.body, model_name, opts.default_max_tokens, opts.max_tokens_limit,
                                      n_vocab);
  auto [adm, ids] = admit_request(hreq, req, completion ? "cmpl-" : "chatcmpl-");
  ids.echo = echo_text(req);
  if (!req.stream) return reply_whole(adm, req, ids, res);
  stream_reply(std::move(adm), req, std::move(ids), res,
               [this](StreamedTurn& t, httplib::DataSink& sink) { stream(t, sink); });
}

std::pair<Gateway::Impl::Admitted, Gateway::Impl::ReplyIds> Gateway::Impl::admit_request(
    const httplib::Request& hreq, const ChatRequest& req, const std::string& id_prefix) {
  AccessRecord rec;
  rec.method = hreq.method;
  rec.path = hreq.path;
  rec.arrived = Clock::now();
  Admitted adm = acquire(req);
  rec.admitted = Clock::now();
  ReplyIds ids{id_prefix + std::to_string(++served) + "-" +
                   std::to_string(Clock::now().time_since_epoch().count() % 1000000),
               "", req.program_id.empty(), std::move(rec)};
  return {std::move(adm), std::move(ids)};
}

void Gateway::Impl::stream_reply(Admitted adm, const ChatRequest& req, ReplyIds ids, httplib::Response& res,
                                 std::function<void(StreamedTurn&, httplib::DataSink&)> write) {
  // The generation runs in the content provider (this worker thread).
  res.set_header("Cache-Control", "no-cache");
  auto turn = std::make_shared<StreamedTurn>(StreamedTurn{std::move(adm), req, std::move(ids), nullptr});
  turn->end = std::make_shared<TurnEnd>(turn->adm.backend->programs, turn->adm.turn.id);
  turn->adm.end = turn->end;
  res.set_chunked_content_provider("text/event-stream", [turn, write](size_t, httplib::DataSink& sink) {
    write(*turn, sink);
    return true;
  });
}

void Gateway::Impl::reply_whole(Admitted& adm, const ChatRequest& req, const ReplyIds& ids,
                                httplib::Response& res) {
  const std::string id = adm.turn.id;
  std::vector<Outcome> os;
  const OnText quiet = [](const std::string&, const Outcome&) { return true; };
  try {
    os.push_back(generate(adm, req, quiet));
    for (int i = 1; i < req.n; ++i) os.push_back(generate_fork(adm, req, i, quiet));
  } catch (...) {
    free_forks(adm);
    adm.backend->programs->end(adm.turn.id);  // the turn's backend, after any resume
    throw;
  }
  free_forks(adm);
  adm.backend->programs->end(adm.turn.id);
  for (const Outcome& o : os)
    if (!o.error.empty()) throw o.failure();
  res.set_content(json_text(completion_json(req, ids.rid, id, os, ids.ephemeral, ids.echo)),
                  "application/json");
  log_reply(ids.log, adm, req, ids, os);
}

void Gateway::Impl::stream(StreamedTurn& t, httplib::DataSink& sink) {
  const ChunkWriter w{t, model_name, sink};
  bool ok = true;
  std::string failure;
  std::vector<Outcome> os;
  for (int i = 0; i < t.req.n; ++i) stream_choice(t, w, i, ok, failure, os);
  free_forks(t.adm);
  t.end->end();
  if (!failure.empty()) {
    w.send(json::parse(failure));
  } else if (ok && t.req.include_usage) {
    json u = w.chunk(0, json::object(), nullptr, nullptr);
    u["choices"] = json::array();
    u["usage"] = usage_json(os);
    w.send(u);
  }
  const std::string done = "data: [DONE]\n\n";
  sink.write(done.data(), done.size());
  sink.done();
  AccessRecord rec = t.ids.log;
  if (!failure.empty()) rec.status = 500;  // the stream had begun: its error went out as an event
  log_reply(std::move(rec), t.adm, t.req, t.ids, os);
}

void Gateway::Impl::stream_choice(StreamedTurn& t, const ChunkWriter& w, int i, bool& ok,
                                  std::string& failure, std::vector<Outcome>& os) {
  const ChatRequest& req = t.req;
  const size_t index = static_cast<size_t>(i);
  size_t lp_sent = 0;                                        // logprobs entries sent with its chunks
  int64_t offset = static_cast<int64_t>(t.ids.echo.size());  // a completion's text_offset
  auto logprobs = [&](const Outcome& o) -> json {
    if (req.sampling.logprobs < 0) return nullptr;
    const size_t to = o.logprobs.size();
    json j = req.completion ? legacy_logprobs(model->tokenizer, o.logprobs, lp_sent, to, offset)
                            : chat_logprobs(model->tokenizer, o.logprobs, lp_sent, to);
    lp_sent = to;
    return j;
  };
  if (ok && !req.completion)
    ok = w.send(index, {{"role", "assistant"}, {"content", ""}});
  else if (ok && !t.ids.echo.empty())
    ok = w.send(index, {{"content", t.ids.echo}});
  ToolCallStream calls;  // with tools: text that may be a call is held until the reply ends
  const OnText on_text = [&](const std::string& text, const Outcome& so_far) {
    const std::string ready = req.tools.active() ? calls.push(text) : text;
    if (!ready.empty()) ok = ok && w.send(index, {{"content", ready}}, logprobs(so_far));
    return ok;
  };
  os.push_back(i == 0 ? generate(t.adm, req, on_text) : generate_fork(t.adm, req, i, on_text));
  const Outcome& o = os.back();
  if (!o.error.empty() && failure.empty()) failure = o.failure().body;
  if (!ok || !failure.empty()) return;
  // Tool calls as OpenAI streams them: per call, its id and name with empty arguments, then the
  // arguments; held text that was no call goes out as content.
  for (json& c : tool_calls_json(o.calls, true)) {
    const json args = c["function"]["arguments"];
    c["function"]["arguments"] = "";
    w.send(index, {{"tool_calls", json::array({c})}});
    w.send(index,
           {{"tool_calls", json::array({{{"index", c["index"]}, {"function", {{"arguments", args}}}}})}});
  }
  if (o.calls.empty() && !calls.held().empty()) w.send(index, {{"content", calls.held()}});
  // The logprobs of tokens whose text has not gone out (held back, or none) come last.
  const json rest = lp_sent < o.logprobs.size() ? logprobs(o) : json(nullptr);
  ok = w.send(index, o.cut_call.empty() ? json::object() : json{{"cut_tool_call", o.cut_call}}, rest,
              o.finish_reason);
}

}  // namespace chorus
