#include "gateway/gateway.h"

#include <httplib.h>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/atoms.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "gateway/auth.h"
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
  TurnEnd(GatewayPrograms& programs, std::string id) : programs_(programs), id_(std::move(id)) {}
  ~TurnEnd() {
    if (done_) return;
    programs_.set_contents(id_, "", 1);  // not known (tokens > 0: the next request clears it)
    end();
  }
  void end() {
    if (!done_.exchange(true)) programs_.end(id_);
  }

 private:
  GatewayPrograms& programs_;
  std::string id_;
  std::atomic<bool> done_{false};
};

}  // namespace

struct Gateway::Impl {
  caf::actor_system* sys = nullptr;
  caf::actor batcher;
  const Model* model = nullptr;
  GatewayOptions opts;
  std::string model_name;
  std::unique_ptr<GatewayPrograms> programs;
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

  Plan plan(const ChatRequest& req, BlockId block, const std::string& have_text, int64_t have_tokens) const {
    Plan p;
    p.block = block;
    const ChatTemplate chat = model->chat ? *model->chat : ChatTemplate::chatml();
    p.prompt = chat.apply(req.messages, true);
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

  // A request admitted to run: its program, its plan, and the actor that sent its generation
  // (which hears its events).
  struct Admitted {
    GatewayPrograms::Turn turn;
    Plan plan;
    std::shared_ptr<caf::scoped_actor> self;
  };

  // Takes the program for a request, plans the request (counting the room it needs), and sends
  // it to the memory actor, returning once it runs: while its program is paused or short of
  // room it waits there for the scheduler (503 program_paused when that takes too long).
  // Before a streamed reply begins, so that a client gets that as an HTTP status.
  Admitted acquire(const ChatRequest& req) {
    Admitted a;
    a.turn = programs->begin(req.program_id);
    try {
      a.plan = plan(req, a.turn.block, a.turn.text, a.turn.tokens);
    } catch (...) {
      programs->end(a.turn.id);
      throw;
    }
    const int64_t need = a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) + req.max_tokens;
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
    stop.max_tokens = req.max_tokens;
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
    std::string finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    std::string error;
    Errc code = Errc::internal;  // the error's class: out_of_memory (the KV pool ran out) is a 503
    // The error as a client gets it (error must be set).
    HttpError failure() const { return http_error(make_error(code, "generation failed: " + error)); }
  };

  Outcome generate(const Admitted& a, const ChatRequest& req,
                   const std::function<bool(const std::string&)>& on_text) {
    Outcome out;
    const GatewayPrograms::Turn& turn = a.turn;
    const Plan& plan = a.plan;
    const int64_t have_tokens = plan.have_tokens;
    out.cached_tokens = have_tokens;
    const std::vector<TokenId>& toks = plan.toks;
    caf::scoped_actor& self = *a.self;
    std::string raw;
    bool finished = false, eog = false, client_gone = false;
    std::string held;  // text that may be the start of a stop string: not sent yet
    auto emit = [&](const std::string& text) {
      if (client_gone || text.empty()) return;
      if (!on_text(text)) client_gone = true;
    };
    while (!finished) {
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
        auto e = decode_reply(f);
        if (!e) return;
        if (e->kind == ReplyKind::token) {
          if (e->token >= 0) ++out.completion_tokens;
          if (e->token >= 0 && model->tokenizer.is_end_of_generation(e->token)) eog = true;
          raw += e->text;
          held += e->text;
          // Hold back a tail that could begin a stop string; send the rest.
          size_t keep = 0;
          for (const auto& s : req.stop)
            for (size_t k = std::min(s.size() - 1, held.size()); k > keep; --k)
              if (held.compare(held.size() - k, k, s, 0, k) == 0) {
                keep = k;
                break;
              }
          bool stopped = false;
          for (const auto& s : req.stop)
            if (const auto at = held.find(s); at != std::string::npos) {
              held.resize(at);
              stopped = true;
            }
          if (stopped) keep = 0;
          emit(held.substr(0, held.size() - keep));
          out.content += held.substr(0, held.size() - keep);
          held.erase(0, held.size() - keep);
          if (stopped) held.clear();
        } else if (e->kind == ReplyKind::finished) {
          finished = true;
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
    if (!held.empty()) {  // no stop string after all
      emit(held);
      out.content += held;
    }
    out.prompt_tokens = have_tokens + static_cast<int64_t>(toks.size());
    programs->count(static_cast<int64_t>(toks.size()), out.completion_tokens, have_tokens, 0);
    // After an error the block's text is not known: empty text makes the next request start it again.
    programs->set_contents(turn.id, out.error.empty() ? plan.prompt + raw + (eog ? "<|im_end|>" : "") : "",
                           have_tokens + static_cast<int64_t>(toks.size()) + out.completion_tokens);
    return out;
  }

  json completion_json(const std::string& rid, const std::string& id, const Outcome& o, bool ephemeral) {
    json r = {{"id", rid},
              {"object", "chat.completion"},
              {"created", static_cast<int64_t>(std::time(nullptr))},
              {"model", model_name},
              {"choices", json::array({json{{"index", 0},
                                            {"message", {{"role", "assistant"}, {"content", o.content}}},
                                            {"finish_reason", o.finish_reason}}})},
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
    const ChatRequest req =
        parse_chat_request(hreq.body, model_name, opts.default_max_tokens, opts.max_tokens_limit);
    Admitted adm = acquire(req);
    const GatewayPrograms::Turn& turn = adm.turn;
    const std::string id = turn.id;
    const std::string rid = "chatcmpl-" + std::to_string(programs->requests_served() + 1) + "-" +
                            std::to_string(Clock::now().time_since_epoch().count() % 1000000);
    const bool ephemeral = req.program_id.empty();
    if (!req.stream) {
      Outcome o;
      try {
        o = generate(adm, req, [](const std::string&) { return true; });
      } catch (...) {
        programs->end(id);
        throw;
      }
      programs->end(id);
      if (!o.error.empty()) throw o.failure();
      res.set_content(json_text(completion_json(rid, id, o, ephemeral)), "application/json");
      return;
    }
    // Streaming: the generation runs in the content provider (this worker thread).
    res.set_header("Cache-Control", "no-cache");
    auto turn_end = std::make_shared<TurnEnd>(*programs, id);
    res.set_chunked_content_provider("text/event-stream", [this, adm = std::move(adm), req, rid, ephemeral,
                                                           turn_end](size_t, httplib::DataSink& sink) {
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
      Outcome o = generate(adm, req, [&](const std::string& text) {
        return ok = ok && send(chunk({{"content", text}}, nullptr));
      });
      turn_end->end();
      if (!o.error.empty()) {
        send(json::parse(o.failure().body));
      } else {
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
              r.set_content(json_text(programs->list()), "application/json");
            }));
    svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
              r.set_content(programs->metrics_text(), "text/plain; version=0.0.4");
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
               programs->release_by_client(id);
               r.set_content(json_text(json{{"program_id", id}, {"released", true}}), "application/json");
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
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->batcher = batcher;
  impl->model = &model;
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
  p->programs = std::make_unique<GatewayPrograms>(sys, std::move(batcher), p->opts, scheduler);
  p->http = std::thread([p] { p->svr.listen_after_bind(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::stop() {
  if (!impl_ || !impl_->http.joinable()) return;
  impl_->programs->stop_waiting();  // requests waiting for a restore get their 503 now
  impl_->svr.stop();
  impl_->http.join();       // requests in flight end
  impl_->programs->stop();  // then every program is released
}

}  // namespace chorus
