// The gateway (gateway/gateway.h): a request admitted — its program, the plan of what runs on its
// block, the room it needs, on the backend that has it — and the HTTP routes. The generation and
// the replies are in gateway_reply.cpp, the state both share in gateway_impl.h.
#include "gateway/gateway_impl.h"

namespace chorus {

Result<std::string> Gateway::Impl::render_prompt(const ChatRequest& req) const {
  if (chat->renders_tools()) return chat->apply(req.messages, true, req.tools.tools_json);
  std::vector<ChatMessage> messages = calls_as_text(req.messages);
  if (!req.tools.offered()) return chat->apply(messages, true);
  const std::string about = describe_tools(req.tools);
  if (!messages.empty() && messages.front().role == "system")
    messages.front().content += "\n\n" + about;
  else
    messages.insert(messages.begin(), ChatMessage{"system", about});
  return chat->apply(messages, true);
}

Gateway::Impl::Plan Gateway::Impl::plan(const ChatRequest& req, BlockId block, const std::string& have_text,
                                        int64_t have_tokens) const {
  Plan p;
  p.block = block;
  if (req.completion && !req.prompt_ids.empty()) {
    p.toks = req.prompt_ids;
    p.restart = have_tokens > 0;
    p.known = false;
    return p;
  }
  if (req.completion) {
    p.prompt = req.prompt_text;
  } else {
    auto prompt = render_prompt(req);
    if (!prompt) throw http_error(prompt.error());
    p.prompt = std::move(*prompt);
  }
  std::string_view delta = p.prompt;
  // Choices fork from the prompt's last token: at least one must be new.
  const bool reuse = !have_text.empty() && p.prompt.compare(0, have_text.size(), have_text) == 0 &&
                     (req.n == 1 || p.prompt.size() > have_text.size());
  if (reuse) {
    delta.remove_prefix(have_text.size());  // the conversation so far is in the block already
    p.have_tokens = have_tokens;
  } else {
    p.restart = have_tokens > 0;
  }
  p.toks = model->tokenizer.encode(std::string(delta),
                                   {.add_special = req.completion && !reuse, .parse_special = true});
  if (p.toks.empty() && p.have_tokens == 0)
    bad_request("`prompt` is empty: there is nothing to continue", "prompt");
  return p;
}

void Gateway::Impl::keep_common_prefix(Admitted& a, const ChatRequest& req) const {
  Plan& p = a.plan;
  if (!p.restart || !p.known || a.turn.tokens <= 0) return;
  auto snap = a.backend->programs->call(encode_snapshot_view(0, {p.block}, true));
  if (!snap || snap->blocks.size() != 1) return;  // (start again, as before)
  const std::vector<TokenId>& log = snap->blocks.front().log;
  std::vector<size_t> ends;  // the prompt's text length after each kept token
  for (size_t at = 0; ends.size() < log.size();) {
    const std::string piece =
        model->tokenizer.decode(std::span(&log[ends.size()], 1), {.render_special = true});
    if (piece.empty() || p.prompt.compare(at, piece.size(), piece) != 0) break;
    ends.push_back(at += piece.size());
  }
  // Choices fork from the prompt's last token: at least one must be new.
  while (!ends.empty() && req.n > 1 && ends.back() >= p.prompt.size()) ends.pop_back();
  if (ends.empty()) return;
  p.keep = p.have_tokens = static_cast<int64_t>(ends.size());
  p.toks = model->tokenizer.encode(p.prompt.substr(ends.back()), {.parse_special = true});
}

void Gateway::Impl::free_forks(Admitted& a) {
  for (const Fork& f : a.forks)
    if (auto r = a.backend->programs->call(encode_free_block(0, f.block)); !r)
      spdlog::warn("gateway: freeing the fork block {} of `{}`: {}", f.block, a.turn.id, r.error().message);
  a.forks.clear();
}

Result<Reply> Gateway::Impl::finished(caf::scoped_actor& self) {
  std::optional<Reply> done;
  while (!done)
    self->receive([&](event_atom, const std::vector<uint8_t>& f) {
      if (auto e = decode_reply(f); e && e->kind == ReplyKind::finished) done = std::move(*e);
    });
  if (done->reason == FinishReason::context_full) return make_error(Errc::out_of_memory, done->text);
  if (done->reason == FinishReason::error) return make_error(Errc::internal, done->text);
  return *done;
}

Gateway::Impl::Admitted Gateway::Impl::acquire(const ChatRequest& req, const std::vector<TokenId>& resumed) {
  constexpr int kMaxMoves = 3;
  Moved moved;
  for (int moves = 0;; ++moves) {
    auto a = acquire_on(req, resumed, moved, moves < kMaxMoves);
    if (auto* admitted = std::get_if<Admitted>(&a)) return std::move(*admitted);
    moved = std::get<Moved>(std::move(a));
  }
}

std::variant<Gateway::Impl::Admitted, Gateway::Impl::Moved> Gateway::Impl::acquire_on(
    const ChatRequest& req, const std::vector<TokenId>& resumed, const Moved& moved, bool may_move) {
  Admitted a;
  a.backend = backends.place(req.program_id, moved.from);
  GatewayPrograms* programs = a.backend->programs.get();
  a.turn = programs->begin(req.program_id);
  // A program that moved here with its KV: its new block gets it (else the turn recomputes).
  if (moved.carried && a.turn.tokens == 0 && !a.turn.ephemeral &&
      carry_in(*programs, a.turn.id, a.turn.block, *moved.carried, a.backend->name)) {
    a.turn.text = moved.carried->text;
    a.turn.tokens = static_cast<int64_t>(moved.carried->image.tokens.size());
    backends.carried(moved.carried->image.kv.size());
  }
  const auto since = Clock::now();
  if (!admit_turn(a, req, resumed, may_move)) {  // nothing of it ran: it was ended where it waited
    free_forks(a);
    backends.moved(a.turn.id, a.backend->name, std::chrono::duration<double>(Clock::now() - since).count());
    Moved next{a.backend->name, nullptr};
    if (!a.turn.ephemeral) {
      next.carried =
          carry_out(*programs, a.turn.id, a.turn.block, a.turn.text, opts.move_cost, a.backend->name);
      try {
        programs->release_by_client(a.turn.id);
      } catch (const HttpError&) {  // another request took it meanwhile: it stays
      }
    }
    return next;
  }
  return a;
}

bool Gateway::Impl::admit_turn(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& resumed,
                               bool may_move) {
  GatewayPrograms* programs = a.backend->programs.get();
  bool first = may_move;  // the request's first command may move it: nothing of it ran before
  try {
    a.plan = plan(req, a.turn.block, a.turn.text, a.turn.tokens);
  } catch (...) {
    programs->end(a.turn.id);
    throw;
  }
  keep_common_prefix(a, req);
  a.plan.toks.insert(a.plan.toks.end(), resumed.begin(), resumed.end());
  const int max_tokens = req.max_tokens - static_cast<int>(resumed.size());
  const int64_t need = a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) +
                       static_cast<int64_t>(req.n) * (max_tokens + (req.n > 1 ? kKvPageSize : 0));
  a.self = std::make_shared<caf::scoped_actor>(*sys);
  // The request's first command was withdrawn where it waited: it moves (nothing of it ran).
  auto moved = [](const Result<Reply>& r) { return !r && r.error().code == Errc::withdrawn; };
  auto fail = [&](const Error& e) {
    free_forks(a);
    programs->end(a.turn.id);
    throw http_error(e);
  };
  if (a.plan.keep > 0) {  // the history changed after its first `keep` tokens: a fork keeps them
    const BlockId old = a.plan.block;
    auto r = programs->admit(
        *a.self, a.turn.id, need,
        [&](uint64_t rid) { return encode_fork_block(rid, old, a.plan.keep, "", a.turn.program); },
        std::exchange(first, false));
    if (moved(r)) return false;
    if (!r || r->kind != ReplyKind::block_info)
      fail(make_error(r ? Errc::internal : r.error().code,
                      "cannot keep the program's common prefix: " + (r ? r->text : r.error().message)));
    a.plan.block = a.turn.block = static_cast<BlockId>(r->id);
    programs->set_block(a.turn.id, a.plan.block);
    if (auto f = programs->call(encode_free_block(0, old)); !f)
      spdlog::warn("gateway: freeing the old block of `{}`: {}", a.turn.id, f.error().message);
    programs->count(0, 0, 0, a.turn.tokens - a.plan.keep);
  } else if (a.plan.restart) {  // the history changed: start the block again
    auto r = programs->admit(
        *a.self, a.turn.id, need, [&](uint64_t rid) { return encode_clear_block(rid, a.plan.block); },
        std::exchange(first, false));
    if (moved(r)) return false;
    if (!r) fail(make_error(r.error().code, "cannot clear the program's block: " + r.error().message));
    programs->count(0, 0, 0, a.turn.tokens);
  }
  StopCondition stop;
  stop.max_tokens = max_tokens;
  stop.strings = req.stop;
  std::vector<TokenId> prefill = a.plan.toks;
  if (req.n > 1) {
    prefill = {a.plan.toks.back()};
    const std::vector<TokenId> head(a.plan.toks.begin(), a.plan.toks.end() - 1);
    if (!head.empty()) {
      const Request fwd = Request::forward(a.plan.block, head, {a.plan.block});
      auto r = programs->admit(
          *a.self, a.turn.id, need, [&](uint64_t rid) { return encode_request(rid, fwd); },
          std::exchange(first, false));
      if (moved(r)) return false;
      if (r && r->kind == ReplyKind::submitted) r = finished(*a.self);
      if (!r) fail(make_error(r.error().code, "the prompt failed: " + r.error().message));
    }
    const int64_t shared = a.plan.have_tokens + static_cast<int64_t>(head.size());
    for (int i = 1; i < req.n; ++i) {
      auto f = programs->call(encode_fork_block(0, a.plan.block, shared, "", a.turn.program));
      if (!f || f->kind != ReplyKind::block_info)
        fail(make_error(f ? Errc::internal : f.error().code, "cannot fork the prompt for choice " +
                                                                 std::to_string(i) + ": " +
                                                                 (f ? f->text : f.error().message)));
      a.forks.push_back({static_cast<BlockId>(f->id), std::make_shared<caf::scoped_actor>(*sys)});
    }
  }
  for (int i = 0; i < req.n; ++i) {
    SamplingParams sampling = req.sampling;
    sampling.seed += static_cast<uint64_t>(i);
    const BlockId b = i == 0 ? a.plan.block : a.forks[static_cast<size_t>(i - 1)].block;
    const Request gen = Request::generate(b, {b}, prefill, std::move(sampling), stop);
    caf::scoped_actor& self = i == 0 ? *a.self : *a.forks[static_cast<size_t>(i - 1)].self;
    auto r = programs->admit(
        self, a.turn.id, need, [&](uint64_t rid) { return encode_request(rid, gen); },
        std::exchange(first, false));
    if (moved(r)) return false;
    if (!r) fail(make_error(r.error().code, "generation failed: " + r.error().message));
    if (r->kind != ReplyKind::submitted) fail(make_error(Errc::internal, "the batcher answered " + r->text));
  }
  return true;
}

httplib::Server::HandlerResponse Gateway::Impl::authorize(const httplib::Request& q,
                                                          httplib::Response& r) const {
  if (opts.metrics_public && (q.path == "/metrics" || q.path == "/health"))
    return httplib::Server::HandlerResponse::Unhandled;
  const std::string header = q.get_header_value("Authorization");  // the token points into it
  const std::string x_api_key = q.get_header_value("x-api-key");   // (Anthropic's clients send this)
  auto token = bearer_token(header);
  if (!token && !x_api_key.empty()) token = std::string_view(x_api_key);
  if (token && key_allowed(*token, opts.api_keys)) return httplib::Server::HandlerResponse::Unhandled;
  r.status = 401;
  r.set_header("WWW-Authenticate", "Bearer");
  const HttpError refused{401, error_body(token ? "Incorrect API key provided"
                                                : "No API key provided: send `Authorization: Bearer KEY` "
                                                  "(or `x-api-key: KEY`)",
                                          "invalid_request_error", "", "invalid_api_key")};
  r.set_content(q.path.starts_with("/v1/messages") ? anthropic_error(refused) : refused.body,
                "application/json");
  return httplib::Server::HandlerResponse::Handled;
}

void Gateway::Impl::routes() {
  auto guarded = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        handler(req, res);
      } catch (const HttpError& e) {
        res.status = e.status;
        res.set_content(e.body, "application/json");
        log_refused(req.method, req.path, e.status, e.body);
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(error_body(std::string("internal error: ") + e.what(), "server_error"),
                        "application/json");
        log_refused(req.method, req.path, 500, res.body);
      }
    };
  };
  svr.Post("/v1/chat/completions",
           guarded([this](const httplib::Request& q, httplib::Response& r) { on_generate(q, r, false); }));
  svr.Post("/v1/completions",
           guarded([this](const httplib::Request& q, httplib::Response& r) { on_generate(q, r, true); }));
  svr.Post("/v1/responses",
           guarded([this](const httplib::Request& q, httplib::Response& r) { on_responses(q, r); }));
  svr.Get(R"(/v1/responses/([^/]+))", guarded([this](const httplib::Request& q, httplib::Response& r) {
            on_stored_response(q, r, false);
          }));
  svr.Delete(R"(/v1/responses/([^/]+))", guarded([this](const httplib::Request& q, httplib::Response& r) {
               on_stored_response(q, r, true);
             }));
  svr.Post("/v1/messages",
           guarded([this](const httplib::Request& q, httplib::Response& r) { on_messages(q, r); }));
  svr.Post("/v1/messages/count_tokens",
           guarded([this](const httplib::Request& q, httplib::Response& r) { on_count_tokens(q, r); }));
  auto model_object = [this] {
    return json{{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "chorus"}};
  };
  svr.Get("/v1/models", guarded([model_object](const httplib::Request&, httplib::Response& r) {
            r.set_content(json_text(json{{"object", "list"}, {"data", json::array({model_object()})}}),
                          "application/json");
          }));
  // One model by its id (the served one; `default` names it too), else OpenAI's 404.
  svr.Get(R"(/v1/models/(.+))",
          guarded([this, model_object](const httplib::Request& q, httplib::Response& r) {
            const std::string id = q.matches[1];
            if (id != model_name && id != "default")
              throw HttpError{404, error_body("The model `" + id + "` does not exist (this server serves `" +
                                                  model_name + "`)",
                                              "invalid_request_error", "model", "model_not_found")};
            r.set_content(json_text(model_object()), "application/json");
          }));
  svr.Get("/programs", guarded([this](const httplib::Request&, httplib::Response& r) {
            r.set_content(json_text(backends.programs_json()), "application/json");
          }));
  svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
            r.set_content(backends.metrics_text() + (opts.more_metrics ? opts.more_metrics() : ""),
                          "text/plain; version=0.0.4");
          }));
  svr.Post("/programs/release", guarded([this](const httplib::Request& q, httplib::Response& r) {
             json j;
             try {
               j = json::parse(q.body);
             } catch (const json::exception& e) {
               bad_request(std::string("the body is not valid JSON: ") + e.what());
             }
             if (!j.is_object() || !j.contains("program_id") || !j["program_id"].is_string())
               bad_request("`program_id` is required (a string)", "program_id");
             const std::string id = j["program_id"];
             const std::shared_ptr<GatewayBackend> b = backends.find(id);
             if (!b) throw program_not_found(id);
             b->programs->release_by_client(id);
             backends.forget(id);
             r.set_content(json_text(json{{"program_id", id}, {"released", true}}), "application/json");
           }));
  svr.Post("/programs/run", guarded([this](const httplib::Request& q, httplib::Response& r) {
             r.set_content(
                 run_topology_request(*sys, *model, backends, q.body, opts.unsafe_tools, opts.placement),
                 "application/json");
           }));
  for (const GatewayRoute& route : opts.routes)
    svr.Get(route.path, guarded([route](const httplib::Request&, httplib::Response& r) {
              r.set_content(route.body(), route.content_type);
            }));
  svr.Get("/health", guarded([](const httplib::Request&, httplib::Response& r) {
            r.set_content(json_text(json{{"status", "ok"}}), "application/json");
          }));
  if (!opts.api_keys.empty())
    svr.set_pre_routing_handler([this](auto& q, auto& r) { return authorize(q, r); });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      res.set_content(error_body("the request body is too large", "invalid_request_error"),
                      "application/json");
    else if (res.status == 404)
      res.set_content(error_body("no route " + req.method + " " + req.path, "invalid_request_error"),
                      "application/json");
    else
      res.set_content(error_body("HTTP " + std::to_string(res.status), "invalid_request_error"),
                      "application/json");
  });
}
Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() {
  stop();
}

int Gateway::port() const {
  return impl_->port;
}

Result<std::unique_ptr<Gateway>> Gateway::start(caf::actor_system& sys, caf::actor batcher,
                                                const Model& model, GatewayOptions opts,
                                                ProgramManager* scheduler) {
  CHORUS_ASSIGN_OR_RETURN(auto gw, start_empty(sys, model, std::move(opts)));
  auto b = std::make_shared<GatewayBackend>();
  b->name = "local";
  b->programs = std::make_shared<GatewayPrograms>(sys, std::move(batcher), gw->impl_->opts, scheduler);
  gw->impl_->backends.add(std::move(b));
  return gw;
}

Result<std::unique_ptr<Gateway>> Gateway::start_empty(caf::actor_system& sys, const Model& model,
                                                      GatewayOptions opts) {
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->model = &model;
  if (!opts.chat_template.empty()) {
    auto text = [&](std::optional<TokenId> id) {
      return id ? std::string(model.tokenizer.token_text(*id)) : std::string();
    };
    auto t = ChatTemplate::from_source(opts.chat_template, text(model.tokenizer.bos()),
                                       text(model.tokenizer.eos()));
    if (!t) return make_error(t.error().code, "gateway: --chat-template: " + t.error().message);
    impl->chat = std::make_shared<ChatTemplate>(std::move(*t));
  } else if (model.chat) {
    impl->chat = std::make_shared<ChatTemplate>(*model.chat);
  } else {
    return make_error(model.chat_error.code, "gateway: " + model.chat_error.message);
  }
  impl->model_name = opts.model_name.empty() ? model.config.name : opts.model_name;
  impl->opts = std::move(opts);
  Impl* p = impl.get();
  p->backends.set_trace(p->opts.trace);
  p->svr.set_payload_max_length(p->opts.max_body_bytes);
  const int threads = p->opts.threads;
  p->svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  p->routes();
  p->port = bind_exclusively(p->svr, p->opts.host, p->opts.port);
  if (p->port <= 0)
    return make_error(Errc::io, "gateway: cannot bind " + p->opts.host + ":" +
                                    (p->opts.port == 0 ? "(any port)" : std::to_string(p->opts.port)));
  p->http = std::thread([p] { p->svr.listen_after_bind(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::add_backend(const std::string& name, caf::actor memory, int64_t pages,
                          std::function<int64_t()> room, int64_t host_pages, std::function<bool()> up) {
  auto b = std::make_shared<GatewayBackend>();
  b->name = name;
  GatewayOptions o = impl_->opts;
  o.policy.capacity_pages = pages;
  o.policy.host_capacity_pages = host_pages;  // what the node offers (--host-pages); 0: pauses drop
  // What a predecessor (a leader before this one) left on the node: its program ids are not
  // given again, and its HTTP programs are taken over below.
  std::vector<ProgramEntryData> found;
  {
    caf::scoped_actor self{*impl_->sys};
    if (auto r = ask(self, memory, encode_list_programs(0), std::chrono::seconds(5)); r)
      found = r->programs;
    else
      spdlog::warn("gateway: cannot list the programs on `{}`: {}", name, r.error().message);
  }
  uint64_t first_id = 1;
  for (const ProgramEntryData& e : found) first_id = std::max(first_id, e.program + 1);
  b->programs = std::make_shared<GatewayPrograms>(*impl_->sys, std::move(memory), o, nullptr, first_id);
  b->room = std::move(room);
  b->up = std::move(up);
  b->programs->set_room_elsewhere(
      [backends = &impl_->backends, name](int64_t pages) { return backends->room_elsewhere(name, pages); });
  if (!impl_->backends.add(b)) {
    b->programs->stop();  // stopping: it serves nothing
    return;
  }
  GatewayBackends& backends = impl_->backends;
  const auto elsewhere = [&backends, &name](const std::string& id) {
    auto at = backends.find(id);
    return at && at->name != name;
  };
  for (const std::string& id : b->programs->adopt(found, impl_->model->tokenizer, elsewhere))
    backends.place_at(id, b);
}

void Gateway::remove_backend(const std::string& name) {
  impl_->backends.remove(name);
}

std::map<std::string, GatewayCensus> Gateway::census() const {
  std::map<std::string, GatewayCensus> out;
  for (const auto& b : impl_->backends.all()) out[b->name] = b->programs->census();
  return out;
}

void Gateway::set_unavailable(const std::string& why) {
  impl_->backends.set_unavailable(why);
}

void Gateway::stop() {
  if (!impl_ || !impl_->http.joinable()) return;
  const auto all = impl_->backends.stop();
  for (const auto& b : all) b->programs->stop_waiting();  // requests waiting for a restore get their 503 now
  impl_->svr.stop();
  impl_->http.join();                             // requests in flight end
  for (const auto& b : all) b->programs->stop();  // then every program is released
}

}  // namespace chorus
