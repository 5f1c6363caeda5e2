#include "gateway/gateway.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "actors/atoms.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "gateway/auth.h"
#include "gateway/gateway_backends.h"
#include "gateway/gateway_programs.h"
#include "gateway/openai_request.h"
#include "net/codec.h"

namespace chorus {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Ends a streamed request's turn once: when its reply is over, or — when the reply never ran
// (the client went away before it began) — when the reply is dropped; the generation then ran
// unseen, so what the block holds is not known and the next request starts it again.
class TurnEnd {
 public:
  TurnEnd(std::shared_ptr<GatewayPrograms> programs, std::string id)
      : programs_(std::move(programs)), id_(std::move(id)) {}
  ~TurnEnd() {
    if (done_) return;
    programs_->set_contents(id_, "", 1);  // not known (tokens > 0: the next request clears it)
    end();
  }
  void end() {
    if (!done_.exchange(true)) programs_->end(id_);
  }
  // The turn moved to another backend (resume), maybe under another id (a one-shot program's):
  // that one is ended next.
  void rebind(std::shared_ptr<GatewayPrograms> programs, std::string id) {
    programs_ = std::move(programs);
    id_ = std::move(id);
    done_ = false;
  }

 private:
  std::shared_ptr<GatewayPrograms> programs_;
  std::string id_;
  std::atomic<bool> done_{false};
};

// A reply's text on its way to the client: a tail that could begin a stop string is held back
// until it is clear; at a stop string the text ends there.
class StopStrings {
 public:
  explicit StopStrings(const std::vector<std::string>& stops) : stops_(stops) {}
  // The text that may go out now.
  std::string push(const std::string& text) {
    held_ += text;
    size_t keep = 0;
    for (const auto& s : stops_)
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
    bool stopped = false;
    for (const auto& s : stops_)
      if (const auto at = held_.find(s); at != std::string::npos) {
        held_.resize(at);
        stopped = true;
      }
    if (stopped) keep = 0;
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    if (stopped) held_.clear();
    return out;
  }
  // At the end: what was held back (it began no stop string after all).
  std::string flush() { return std::exchange(held_, std::string()); }

 private:
  const std::vector<std::string>& stops_;
  std::string held_;
};

}  // namespace

struct Gateway::Impl {
  caf::actor_system* sys = nullptr;
  const Model* model = nullptr;
  std::shared_ptr<const ChatTemplate> chat;  // what prompts are rendered with
  GatewayOptions opts;
  std::string model_name;
  httplib::Server svr;
  std::thread http;
  int port = 0;

  // What a request runs on its program's block, decided once: the rendered prompt, and the
  // tokens to run — only what is new when the block already holds the conversation so far.
  struct Plan {
    BlockId block = -1;
    std::string prompt;
    std::vector<TokenId> toks;
    int64_t have_tokens = 0;  // in the block, reused
    bool restart = false;     // the history changed: the block starts again
  };

  // The request's messages through the chat template, with its tools: given to the template
  // where it shows them to the model, else described in a system turn of chorus's own.
  // A template that knows no tools gets the history's calls and results as text, in the format
  // chorus's system turn teaches (tool_calls.h).
  Result<std::string> render_prompt(const ChatRequest& req) const {
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

  Plan plan(const ChatRequest& req, BlockId block, const std::string& have_text, int64_t have_tokens) const {
    Plan p;
    p.block = block;
    auto prompt = render_prompt(req);
    if (!prompt) throw http_error(prompt.error());
    p.prompt = std::move(*prompt);
    std::string_view delta = p.prompt;
    if (!have_text.empty() && p.prompt.compare(0, have_text.size(), have_text) == 0) {
      delta.remove_prefix(have_text.size());  // the conversation so far is in the block already
      p.have_tokens = have_tokens;
    } else {
      p.restart = have_tokens > 0;
    }
    p.toks = model->tokenizer.encode(std::string(delta), {.parse_special = true});
    return p;
  }

  GatewayBackends backends;  // where programs run
  std::atomic<int64_t> served{0};

  // A request admitted to run: its program, its plan, and the actor that sent its generation
  // (which hears its events).
  struct Admitted {
    std::shared_ptr<GatewayBackend> backend;
    std::shared_ptr<TurnEnd> end;  // a streamed turn's (it ends the turn whatever happens)
    GatewayPrograms::Turn turn;
    Plan plan;
    std::shared_ptr<caf::scoped_actor> self;
  };

  // Takes the program for a request, plans the request (counting the room it needs), and sends
  // it to the memory actor, returning once it runs: while its program is paused or short of
  // room it waits there for the scheduler (503 program_paused when that takes too long).
  // Before a streamed reply begins, so that a client gets that as an HTTP status.
  //
  // A turn resumed elsewhere (its node was lost under it) passes the tokens generated so far,
  // `resumed`: they follow the prompt in the new block, and what is left of max_tokens is
  // generated after them.
  Admitted acquire(const ChatRequest& req, const std::vector<TokenId>& resumed = {}) {
    Admitted a;
    a.backend = backends.place(req.program_id);
    GatewayPrograms* programs = a.backend->programs.get();
    a.turn = programs->begin(req.program_id);
    try {
      a.plan = plan(req, a.turn.block, a.turn.text, a.turn.tokens);
    } catch (...) {
      programs->end(a.turn.id);
      throw;
    }
    a.plan.toks.insert(a.plan.toks.end(), resumed.begin(), resumed.end());
    const int max_tokens = req.max_tokens - static_cast<int>(resumed.size());
    const int64_t need = a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) + max_tokens;
    a.self = std::make_shared<caf::scoped_actor>(*sys);
    auto fail = [&](const Error& e) {
      programs->end(a.turn.id);
      throw http_error(e);
    };
    if (a.plan.restart) {  // the history changed: start the block again
      auto r = programs->admit(*a.self, a.turn.id, need,
                               [&](uint64_t rid) { return encode_clear_block(rid, a.plan.block); });
      if (!r) fail(make_error(r.error().code, "cannot clear the program's block: " + r.error().message));
      programs->count(0, 0, 0, a.turn.tokens);
    }
    StopCondition stop;
    stop.max_tokens = max_tokens;
    stop.strings = req.stop;
    const Request gen = Request::generate(a.plan.block, {a.plan.block}, a.plan.toks, req.sampling, stop);
    auto r =
        programs->admit(*a.self, a.turn.id, need, [&](uint64_t rid) { return encode_request(rid, gen); });
    if (!r) fail(make_error(r.error().code, "generation failed: " + r.error().message));
    if (r->kind != ReplyKind::submitted) fail(make_error(Errc::internal, "the batcher answered " + r->text));
    return a;
  }

  // Runs the request on its session; calls `on_text` with each piece of text as it comes.
  // Returns the finished response fields.
  struct Outcome {
    std::string content;
    std::vector<ToolCall> calls;  // read from the content when the request offered tools
    std::string finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    std::string error;
    Errc code = Errc::internal;  // the error's class: out_of_memory (the KV pool ran out) is a 503
    // The error as a client gets it (error must be set).
    HttpError failure() const { return http_error(make_error(code, "generation failed: " + error)); }
  };

  // When the node under the turn is lost mid-generation (a cluster's backend), the turn goes on
  // on another node: a block of the prompt and the tokens generated so far, then what is left of
  // max_tokens. What the client got stays the turn's prefix; what follows is what the new node's
  // prefill computes (docs/cluster.md). `a` is then the new admission.
  Outcome generate(Admitted& a, const ChatRequest& req,
                   const std::function<bool(const std::string&)>& on_text) {
    Outcome out;
    const int64_t have_tokens = a.plan.have_tokens;  // of the first attempt: what the client is told
    out.cached_tokens = have_tokens;
    out.prompt_tokens = have_tokens + static_cast<int64_t>(a.plan.toks.size());
    std::vector<TokenId> ids;  // generated so far, over every attempt
    std::string raw;
    bool finished = false, eog = false, client_gone = false;
    StopStrings stops(req.stop);
    auto emit = [&](const std::string& text) {
      if (client_gone || text.empty()) return;
      if (!on_text(text)) client_gone = true;
    };
    int64_t before = 0;  // tokens generated before the last attempt
    for (int attempt = 0;; ++attempt) {
      bool lost = false;
      before = static_cast<int64_t>(ids.size());
      while (!finished) {
        (*a.self)->receive([&](event_atom, const std::vector<uint8_t>& f) {
          auto e = decode_reply(f);
          if (!e) return;
          if (e->kind == ReplyKind::token) {
            if (e->token >= 0) ids.push_back(e->token);
            if (e->token >= 0 && model->tokenizer.is_end_of_generation(e->token)) eog = true;
            raw += e->text;
            const std::string ready = stops.push(e->text);
            emit(ready);
            out.content += ready;
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
      a.backend->programs->count(attempt == 0 ? static_cast<int64_t>(a.plan.toks.size()) : 0,
                                 static_cast<int64_t>(ids.size()) - before, attempt == 0 ? have_tokens : 0,
                                 attempt == 0 ? 0 : static_cast<int64_t>(a.plan.toks.size()));
      if (!lost || attempt >= 3 || static_cast<int>(ids.size()) >= req.max_tokens || eog) break;
      if (!resume(a, req, ids)) break;  // out.error stays: no node to go on on
      finished = false;
      out.error.clear();
    }
    out.completion_tokens = static_cast<int64_t>(ids.size());
    const std::string tail = stops.flush();  // no stop string after all
    emit(tail);
    out.content += tail;
    const bool cut = out.finish_reason == "length" && req.tools.constrained();
    if (req.tools.active() && (out.finish_reason == "stop" || cut)) {
      ToolReply reply = read_tool_calls(out.content, req.tools, cut);
      if (!reply.calls.empty()) {
        out.content = std::move(reply.content);
        out.calls = std::move(reply.calls);
        out.finish_reason = "tool_calls";
      }
    }
    // The last attempt's block: what it found, its prompt (and the tokens of earlier attempts), what it made.
    const int64_t in_block =
        a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) + out.completion_tokens - before;
    // After an error the block's text is not known: empty text makes the next request start it again.
    a.backend->programs->set_contents(
        a.turn.id,
        out.error.empty()
            ? a.plan.prompt + raw + (eog ? std::string(model->tokenizer.token_text(ids.back())) : "")
            : "",
        in_block);
    return out;
  }

  // The turn's node was lost: the old turn ends there (its block is not known), and the turn is
  // admitted again on another node with the tokens so far. false (the error stands) when no node
  // will take it.
  bool resume(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& ids) {
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

  static json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
    json list = json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
      json c = {{"id", calls[k].id},
                {"type", "function"},
                {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
      if (with_index) c["index"] = k;
      list.push_back(std::move(c));
    }
    return list;
  }

  json completion_json(const std::string& rid, const std::string& id, const Outcome& o, bool ephemeral) {
    json message = {{"role", "assistant"}, {"content", o.content}};
    if (!o.calls.empty()) {
      if (o.content.empty()) message["content"] = nullptr;
      message["tool_calls"] = tool_calls_json(o.calls, false);
    }
    json r = {{"id", rid},
              {"object", "chat.completion"},
              {"created", static_cast<int64_t>(std::time(nullptr))},
              {"model", model_name},
              {"choices",
               json::array({json{{"index", 0}, {"message", message}, {"finish_reason", o.finish_reason}}})},
              {"usage", usage_json(o)}};
    if (!ephemeral) r["program_id"] = id;
    return r;
  }

  static json usage_json(const Outcome& o) {
    return {{"prompt_tokens", o.prompt_tokens},
            {"completion_tokens", o.completion_tokens},
            {"total_tokens", o.prompt_tokens + o.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
  }

  void on_chat(const httplib::Request& hreq, httplib::Response& res) {
    if (const std::string why = backends.unavailable(); !why.empty())
      throw HttpError{503, error_body(why, "server_error", "", "not_leader")};
    const ChatRequest req =
        parse_chat_request(hreq.body, model_name, opts.default_max_tokens, opts.max_tokens_limit);
    Admitted adm = acquire(req);
    const std::string id = adm.turn.id;
    const std::string rid = "chatcmpl-" + std::to_string(++served) + "-" +
                            std::to_string(Clock::now().time_since_epoch().count() % 1000000);
    const bool ephemeral = req.program_id.empty();
    if (!req.stream) {
      Outcome o;
      try {
        o = generate(adm, req, [](const std::string&) { return true; });
      } catch (...) {
        adm.backend->programs->end(adm.turn.id);  // the turn's backend, after any resume
        throw;
      }
      adm.backend->programs->end(adm.turn.id);
      if (!o.error.empty()) throw o.failure();
      res.set_content(json_text(completion_json(rid, id, o, ephemeral)), "application/json");
      return;
    }
    // Streaming: the generation runs in the content provider (this worker thread).
    res.set_header("Cache-Control", "no-cache");
    auto turn_end = std::make_shared<TurnEnd>(adm.backend->programs, id);
    adm.end = turn_end;
    res.set_chunked_content_provider("text/event-stream", [this, adm = std::move(adm), req, rid, ephemeral,
                                                           turn_end](size_t,
                                                                     httplib::DataSink& sink) mutable {
      const GatewayPrograms::Turn& turn = adm.turn;
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      auto chunk = [&](const json& delta, const json& finish_reason) {
        json c = {{"id", rid},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", model_name},
                  {"choices",
                   json::array({json{{"index", 0}, {"delta", delta}, {"finish_reason", finish_reason}}})}};
        if (!ephemeral) c["program_id"] = turn.id;
        return c;
      };
      auto send = [&](const json& j) {
        const std::string line = "data: " + json_text(j) + "\n\n";
        return sink.write(line.data(), line.size());
      };
      bool ok = send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
      ToolCallStream calls;  // with tools: text that may be a call is held until the reply ends
      Outcome o = generate(adm, req, [&](const std::string& text) {
        const std::string ready = req.tools.active() ? calls.push(text) : text;
        if (!ready.empty()) ok = ok && send(chunk({{"content", ready}}, nullptr));
        return ok;
      });
      turn_end->end();
      if (!o.error.empty()) {
        send(json::parse(o.failure().body));
      } else {
        // Tool calls as OpenAI streams them: per call, its id and name with empty arguments,
        // then the arguments; held text that was no call goes out as content.
        for (json& c : tool_calls_json(o.calls, true)) {
          const json args = c["function"]["arguments"];
          c["function"]["arguments"] = "";
          send(chunk({{"tool_calls", json::array({c})}}, nullptr));
          send(chunk(
              {{"tool_calls", json::array({{{"index", c["index"]}, {"function", {{"arguments", args}}}}})}},
              nullptr));
        }
        if (o.calls.empty() && !calls.held().empty()) send(chunk({{"content", calls.held()}}, nullptr));
        send(chunk(json::object(), o.finish_reason));
        if (req.include_usage) {
          json u = chunk(json::object(), nullptr);
          u["choices"] = json::array();
          u["usage"] = usage_json(o);
          send(u);
        }
      }
      const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
  }

  // With API keys: a request without one of them is answered 401 here, before any route.
  httplib::Server::HandlerResponse authorize(const httplib::Request& q, httplib::Response& r) const {
    if (opts.metrics_public && (q.path == "/metrics" || q.path == "/health"))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string header = q.get_header_value("Authorization");  // the token points into it
    const auto token = bearer_token(header);
    if (token && key_allowed(*token, opts.api_keys)) return httplib::Server::HandlerResponse::Unhandled;
    r.status = 401;
    r.set_header("WWW-Authenticate", "Bearer");
    r.set_content(error_body(token ? "Incorrect API key provided"
                                   : "No API key provided: send `Authorization: Bearer KEY`",
                             "invalid_request_error", "", "invalid_api_key"),
                  "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }

  void routes() {
    auto guarded = [this](auto handler) {
      return [this, handler](const httplib::Request& req, httplib::Response& res) {
        try {
          handler(req, res);
        } catch (const HttpError& e) {
          res.status = e.status;
          res.set_content(e.body, "application/json");
        } catch (const std::exception& e) {
          res.status = 500;
          res.set_content(error_body(std::string("internal error: ") + e.what(), "server_error"),
                          "application/json");
        }
      };
    };
    svr.Post("/v1/chat/completions",
             guarded([this](const httplib::Request& q, httplib::Response& r) { on_chat(q, r); }));
    svr.Get(
        "/v1/models", guarded([this](const httplib::Request&, httplib::Response& r) {
          json m = {{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "chorus"}};
          r.set_content(json_text(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
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
};

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
  p->svr.set_payload_max_length(p->opts.max_body_bytes);
  const int threads = p->opts.threads;
  p->svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  p->routes();
  if (p->opts.port == 0) {
    p->port = p->svr.bind_to_any_port(p->opts.host);
    if (p->port <= 0) return make_error(Errc::io, "gateway: cannot bind " + p->opts.host + " (any port)");
  } else {
    if (!p->svr.bind_to_port(p->opts.host, p->opts.port))
      return make_error(Errc::io,
                        "gateway: cannot bind " + p->opts.host + ":" + std::to_string(p->opts.port));
    p->port = p->opts.port;
  }
  p->http = std::thread([p] { p->svr.listen_after_bind(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::add_backend(const std::string& name, caf::actor memory, int64_t pages,
                          std::function<int64_t()> room) {
  auto b = std::make_shared<GatewayBackend>();
  b->name = name;
  GatewayOptions o = impl_->opts;
  o.policy.capacity_pages = pages;
  o.policy.host_capacity_pages = 0;  // a remote node's host memory is not offered: pauses drop
  b->programs = std::make_shared<GatewayPrograms>(*impl_->sys, std::move(memory), o, nullptr);
  b->room = std::move(room);
  if (!impl_->backends.add(b)) b->programs->stop();  // stopping: it serves nothing
}

void Gateway::remove_backend(const std::string& name) {
  impl_->backends.remove(name);
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
