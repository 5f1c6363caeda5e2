#include "actors/gateway.h"

#include <caf/all.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <httplib.h>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>

#include "actors/atoms.h"
#include "actors/codec.h"
#include "actors/openai_request.h"
#include "engine/chat_template.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace chorus {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One program of the gateway: one block holding its conversation.
struct Session {
  std::string id;
  uint64_t program = 0;   // the batcher's program id
  BlockId block = -1;
  std::string text;       // what the block holds, as text
  int64_t tokens = 0;     // tokens in the block
  bool ephemeral = false; // no program_id: released after its request
  bool busy = false;      // a request in flight (or waiting to be restored)
  bool paused = false;
  bool offloaded = false;
  bool moving = false;    // a pause or restore is under way
  double phase_since = 0; // busy: when the request began; idle: when the last one ended
  double paused_since = 0;
  double last_used = 0;
  int64_t requests = 0;
  int64_t need_tokens = 0;  // busy: what the request in flight may fill (prompt + max_tokens)
};

}  // namespace

struct Gateway::Impl {
  caf::actor_system* sys = nullptr;
  caf::actor batcher;
  const Model* model = nullptr;
  GatewayOptions opts;
  std::string model_name;
  ProgramPolicy policy{ProgramPolicyOptions{}};
  httplib::Server svr;
  std::thread http, sched;
  int port = 0;

  std::mutex m;
  std::mutex sched_m;  // serializes schedule(): a decision sees the last one's outcome
  std::condition_variable cv;
  std::map<std::string, Session> sessions;
  uint64_t next_program = 1;
  uint64_t next_anon = 1;
  bool stopping = false;

  // Metrics.
  std::atomic<int64_t> prompt_tokens{0}, completion_tokens{0}, reused_tokens{0}, recomputed_tokens{0};
  std::atomic<int64_t> requests{0}, pauses{0}, restores{0};
  // Where a request's time goes (guarded by m): all of it, from arrival to its end, and the part
  // spent waiting for its program to be restored. Their ratio says how much the scheduling costs;
  // the first over the wall time is the mean number of requests in flight.
  double request_seconds = 0, restore_wait_seconds = 0;
  std::deque<double> recent;  // end times of requests in the last minute (under m)
  Clock::time_point t0 = Clock::now();

  double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  // A command to the batcher; the reply frame, decoded (an Error reply is an error).
  Result<Reply> call(const Frame& f) {
    caf::scoped_actor self{*sys};
    Result<Reply> out = make_error(Errc::internal, "no reply from the batcher");
    self->request(batcher, std::chrono::seconds(600), frame_atom::value, f)
        .receive([&](const std::vector<uint8_t>& r) { out = decode_reply(r); },
                 [&](caf::error& e) { out = make_error(Errc::internal, caf::to_string(e)); });
    if (out && out->kind == "Error") return make_error(Errc::invalid_argument, out->text);
    return out;
  }


  // ---- programs ----------------------------------------------------------------------------------

  // The session for `id` (created, with its program and block, when new). Under no lock.
  Result<std::string> open_session(const std::string& id) {
    std::unique_lock<std::mutex> l(m);
    if (!id.empty() && sessions.count(id)) return id;
    const uint64_t program = next_program++;
    const std::string key = id.empty() ? "anon-" + std::to_string(next_anon++) : id;
    l.unlock();
    ProgramCmd reg;
    reg.program = program;
    reg.name = key;
    if (auto r = call(encode_program(0, reg)); !r) return r.error();
    auto b = call(encode_create_block(0, key, program));
    if (!b) {
      ProgramCmd t{ProgramCmd::Op::terminate, program, "", {}, PauseMode::drop};
      (void)call(encode_program(0, t));
      return b.error();
    }
    l.lock();
    Session s;
    s.id = key;
    s.program = program;
    s.block = static_cast<BlockId>(b->id);
    s.ephemeral = id.empty();
    s.phase_since = s.last_used = now();
    sessions[key] = std::move(s);
    return key;
  }

  // Ends a program: its blocks are freed. Under no lock; the session must not be busy.
  void release(const std::string& id) {
    uint64_t program = 0;
    {
      std::lock_guard<std::mutex> l(m);
      auto it = sessions.find(id);
      if (it == sessions.end()) return;
      program = it->second.program;
      sessions.erase(it);
    }
    ProgramCmd t{ProgramCmd::Op::terminate, program, "", {}, PauseMode::drop};
    if (auto r = call(encode_program(0, t)); !r) spdlog::warn("gateway: releasing program {}: {}", id, r.error().message);
    cv.notify_all();
  }

  // Runs the policy and carries out what it decides (pauses and restores through the batcher).
  void schedule() {
    std::lock_guard<std::mutex> one(sched_m);  // one decision at a time, carried out before the next
    std::vector<std::pair<std::string, PauseMode>> pause;
    std::vector<std::string> restore;
    {
      std::lock_guard<std::mutex> l(m);
      std::vector<ProgramSnapshot> snaps;
      std::map<uint64_t, std::string> by_program;
      const double t = now();
      for (auto& [id, s] : sessions) {
        if (s.moving) continue;
        ProgramSnapshot p;
        p.id = s.program;
        p.pages = KvCache::pages_for(std::max(s.tokens, s.busy ? s.need_tokens : 0));  // room for the request in flight
        p.state = s.paused ? ProgramState::paused : ProgramState::active;
        p.phase = s.busy ? ProgramPhase::reasoning : ProgramPhase::acting;
        p.phase_since = s.phase_since;
        p.paused_since = s.paused_since;
        p.offloaded = s.offloaded;
        p.tools_warm = true;
        p.pinned = s.busy;  // active: not to be paused; paused: a request waits for it
        by_program[s.program] = id;
        snaps.push_back(p);
      }
      const PolicyDecision d = opts.mode == SchedulingMode::program ? policy.decide(t, snaps)
                                  : decide_baseline(opts.mode == SchedulingMode::ttl ? BaselinePolicy::ttl : BaselinePolicy::lru,
                                                    opts.ttl_s, opts.policy.capacity_pages, t, snaps);
      for (const auto& [program, mode] : d.pause) {
        Session& s = sessions[by_program[program]];
        s.moving = true;
        pause.emplace_back(s.id, mode);
      }
      for (uint64_t program : d.restore) {
        Session& s = sessions[by_program[program]];
        s.moving = true;
        restore.push_back(s.id);
      }
    }
    auto carry_out = [&](const std::string& id, ProgramCmd::Op op, PauseMode mode) {
      uint64_t program;
      {
        std::lock_guard<std::mutex> l(m);
        program = sessions.at(id).program;
      }
      ProgramCmd c{op, program, "", {}, mode};
      auto r = call(encode_program(0, c));
      std::lock_guard<std::mutex> l(m);
      Session& s = sessions.at(id);
      s.moving = false;
      if (!r) {
        spdlog::warn("gateway: {} program {}: {}", op == ProgramCmd::Op::pause ? "pausing" : "restoring", id, r.error().message);
        return;
      }
      if (op == ProgramCmd::Op::pause) {
        s.paused = true;
        s.offloaded = mode == PauseMode::offload;
        s.paused_since = now();
        ++pauses;
      } else {
        if (!s.offloaded) recomputed_tokens += s.tokens;  // a dropped program is prefilled again
        s.paused = false;
        s.offloaded = false;
        ++restores;
      }
    };
    for (const auto& [id, mode] : pause) carry_out(id, ProgramCmd::Op::pause, mode);
    for (const auto& id : restore) carry_out(id, ProgramCmd::Op::restore, PauseMode::drop);
    if (!pause.empty() || !restore.empty()) cv.notify_all();
  }

  void scheduler_loop() {
    while (true) {
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait_for(l, std::chrono::milliseconds(250), [&] { return stopping; });
        if (stopping) return;
      }
      std::vector<std::string> expired;
      {
        std::lock_guard<std::mutex> l(m);
        const double t = now();
        for (const auto& [id, s] : sessions)
          if (!s.busy && !s.moving && t - s.last_used > opts.lease_s) expired.push_back(id);
      }
      for (const auto& id : expired) release(id);
      if (policy.due(now())) schedule();
    }
  }

  // ---- requests -----------------------------------------------------------------------------------

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

  // Takes the session for a request: creates it, marks it busy, plans the request (counting the
  // room it needs), waits for the program to be restored.
  std::pair<std::string, Plan> acquire(const ChatRequest& req) {
    auto id = open_session(req.program_id);
    if (!id) throw HttpError{500, error_body("cannot create the program: " + id.error().message, "server_error")};
    BlockId block;
    std::string have_text;
    int64_t have_tokens;
    {
      std::lock_guard<std::mutex> l(m);
      Session& s = sessions.at(*id);
      if (s.busy)
        throw HttpError{409, error_body("program `" + *id + "` already has a request in flight", "invalid_request_error",
                                        "program_id", "program_busy")};
      s.busy = true;  // from here on its text and tokens are this request's to change
      s.phase_since = now();
      ++s.requests;
      block = s.block;
      have_text = s.text;
      have_tokens = s.tokens;
    }
    Plan p = plan(req, block, have_text, have_tokens);
    {
      std::lock_guard<std::mutex> l(m);
      sessions.at(*id).need_tokens = p.have_tokens + static_cast<int64_t>(p.toks.size()) + req.max_tokens;
    }
    schedule();  // a request boundary
    std::unique_lock<std::mutex> l(m);
    const double wait_from = now();
    const bool ready = cv.wait_for(l, std::chrono::duration<double>(opts.restore_wait_s), [&] {
      auto it = sessions.find(*id);
      return stopping || it == sessions.end() || (!it->second.paused && !it->second.moving);
    });
    restore_wait_seconds += now() - wait_from;
    if (!ready || stopping || !sessions.count(*id)) {
      if (sessions.count(*id)) {
        Session& s = sessions.at(*id);
        s.busy = false;
        request_seconds += now() - s.phase_since;
      }
      throw HttpError{503, error_body("program `" + *id + "` could not be restored in time (memory is full)", "server_error",
                                      "", "program_paused")};
    }
    return {*id, std::move(p)};
  }

  // Runs the request on its session; calls `on_text` with each piece of text as it comes.
  // Returns the finished response fields.
  struct Outcome {
    std::string content;
    std::string finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    std::string error;
  };

  Outcome generate(const std::string& id, const ChatRequest& req, const Plan& plan,
                   const std::function<bool(const std::string&)>& on_text) {
    Outcome out;
    int64_t have_tokens = plan.have_tokens;
    if (plan.restart) {  // the history changed: start the block again
      if (auto r = call(encode_clear_block(0, plan.block)); !r) {
        out.error = "cannot clear the program's block: " + r.error().message;
        return out;
      }
      std::lock_guard<std::mutex> l(m);
      recomputed_tokens += sessions.at(id).tokens;
    }
    out.cached_tokens = have_tokens;
    reused_tokens += have_tokens;
    const std::vector<TokenId>& toks = plan.toks;
    StopCondition stop;
    stop.max_tokens = req.max_tokens;
    stop.strings = req.stop;
    Request gen = Request::generate(plan.block, {plan.block}, toks, req.sampling, stop);
    caf::scoped_actor self{*sys};
    std::string raw;
    bool finished = false, eog = false, client_gone = false;
    self->request(batcher, std::chrono::seconds(600), frame_atom::value, encode_request(0, gen))
        .receive(
            [&](const std::vector<uint8_t>& r) {
              auto rep = decode_reply(r);
              if (!rep || rep->kind != "Submitted") {
                out.error = rep ? rep->text : rep.error().message;
                finished = true;
              }
            },
            [&](caf::error& e) {
              out.error = caf::to_string(e);
              finished = true;
            });
    std::string held;  // text that may be the start of a stop string: not sent yet
    auto emit = [&](const std::string& text) {
      if (client_gone || text.empty()) return;
      if (!on_text(text)) client_gone = true;
    };
    while (!finished) {
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
        auto e = decode_reply(f);
        if (!e) return;
        if (e->kind == "TokenEvent") {
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
        } else if (e->kind == "RequestFinished") {
          finished = true;
          if (e->reason == FinishReason::error) out.error = e->text;
          out.finish_reason =
              e->reason == FinishReason::max_tokens || e->reason == FinishReason::context_full ? "length" : "stop";
        }
      });
    }
    if (!held.empty()) {  // no stop string after all
      emit(held);
      out.content += held;
    }
    out.prompt_tokens = have_tokens + static_cast<int64_t>(toks.size());
    prompt_tokens += static_cast<int64_t>(toks.size());
    completion_tokens += out.completion_tokens;
    std::lock_guard<std::mutex> l(m);
    Session& s = sessions.at(id);
    // After an error the block's text is not known: empty text makes the next request start it again.
    s.text = out.error.empty() ? plan.prompt + raw + (eog ? "<|im_end|>" : "") : "";
    s.tokens = have_tokens + static_cast<int64_t>(toks.size()) + out.completion_tokens;
    return out;
  }

  // The request is over: the program idles (acting) until its next one.
  void finish(const std::string& id) {
    bool ephemeral = false;
    {
      std::lock_guard<std::mutex> l(m);
      auto it = sessions.find(id);
      if (it == sessions.end()) return;
      Session& s = it->second;
      s.busy = false;
      request_seconds += now() - s.phase_since;  // phase_since: when the request arrived
      s.phase_since = s.last_used = now();
      ephemeral = s.ephemeral;
      recent.push_back(now());
      while (!recent.empty() && recent.front() < now() - 60) recent.pop_front();
      ++requests;
    }
    if (ephemeral) release(id);
    schedule();  // a request boundary
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
    const ChatRequest req = parse_chat_request(hreq.body, model_name, opts.default_max_tokens, opts.max_tokens_limit);
    auto [id, plan] = acquire(req);
    const std::string rid = "chatcmpl-" + std::to_string(requests.load() + 1) + "-" + std::to_string(Clock::now().time_since_epoch().count() % 1000000);
    const bool ephemeral = req.program_id.empty();
    if (!req.stream) {
      Outcome o;
      try {
        o = generate(id, req, plan, [](const std::string&) { return true; });
      } catch (...) {
        finish(id);
        throw;
      }
      finish(id);
      if (!o.error.empty()) throw HttpError{500, error_body("generation failed: " + o.error, "server_error")};
      res.set_content(completion_json(rid, id, o, ephemeral).dump(), "application/json");
      return;
    }
    // Streaming: the generation runs in the content provider (this worker thread).
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, id = id, req, plan = std::move(plan), rid, ephemeral](
                                                              size_t, httplib::DataSink& sink) {
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      auto chunk = [&](const json& delta, const json& finish_reason) {
        json c = {{"id", rid},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", model_name},
                  {"choices", json::array({json{{"index", 0}, {"delta", delta}, {"finish_reason", finish_reason}}})}};
        if (!ephemeral) c["program_id"] = id;
        return c;
      };
      auto send = [&](const json& j) {
        const std::string line = "data: " + j.dump() + "\n\n";
        return sink.write(line.data(), line.size());
      };
      bool ok = send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
      Outcome o = generate(id, req, plan, [&](const std::string& text) { return ok = ok && send(chunk({{"content", text}}, nullptr)); });
      finish(id);
      if (!o.error.empty()) {
        send(json::parse(error_body("generation failed: " + o.error, "server_error")));
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

  json programs_json() {
    std::lock_guard<std::mutex> l(m);
    json list = json::array();
    const double t = now();
    for (const auto& [id, s] : sessions) {
      if (s.ephemeral) continue;
      list.push_back({{"program_id", id},
                      {"tokens", s.tokens},
                      {"pages", KvCache::pages_for(s.tokens)},
                      {"state", s.paused ? (s.offloaded ? "paused (offloaded)" : "paused") : "active"},
                      {"phase", s.busy ? "reasoning" : "acting"},
                      {"idle_s", s.busy ? 0.0 : t - s.last_used},
                      {"requests", s.requests}});
    }
    return json{{"object", "list"}, {"data", list}};
  }

  std::string metrics_text() {
    std::lock_guard<std::mutex> l(m);
    int64_t resident = 0, paused = 0, active = 0;
    for (const auto& [id, s] : sessions) {
      if (s.paused) ++paused;
      else {
        ++active;
        resident += KvCache::pages_for(s.tokens);
      }
    }
    const double reused = static_cast<double>(reused_tokens.load());
    const double recomputed = static_cast<double>(recomputed_tokens.load());
    const double hit = reused + recomputed > 0 ? reused / (reused + recomputed) : 1.0;
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
             std::to_string(v) + "\n";
    };
    metric("chorus_resident_pages", "gauge", "KV pages held by active programs", static_cast<double>(resident));
    metric("chorus_capacity_pages", "gauge", "KV pages the programs share", static_cast<double>(opts.policy.capacity_pages));
    metric("chorus_active_programs", "gauge", "programs with their KV resident", static_cast<double>(active));
    metric("chorus_paused_programs", "gauge", "programs paused (KV dropped or offloaded)", static_cast<double>(paused));
    metric("chorus_reused_tokens_total", "counter", "prompt tokens found in a program's block", reused);
    metric("chorus_recomputed_tokens_total", "counter", "tokens prefilled again (restored after a drop, or history changed)",
           recomputed);
    metric("chorus_kv_hit_rate", "gauge", "reused / (reused + recomputed)", hit);
    metric("chorus_prompt_tokens_total", "counter", "prompt tokens run", static_cast<double>(prompt_tokens.load()));
    metric("chorus_completion_tokens_total", "counter", "tokens generated", static_cast<double>(completion_tokens.load()));
    metric("chorus_requests_total", "counter", "chat completions served", static_cast<double>(requests.load()));
    metric("chorus_requests_per_minute", "gauge", "chat completions in the last minute", static_cast<double>(recent.size()));
    metric("chorus_pauses_total", "counter", "programs paused", static_cast<double>(pauses.load()));
    metric("chorus_restores_total", "counter", "programs restored", static_cast<double>(restores.load()));
    metric("chorus_request_seconds_total", "counter", "seconds requests took, arrival to end (summed over requests)",
           request_seconds);
    metric("chorus_restore_wait_seconds_total", "counter",
           "seconds requests waited for their program to be restored (summed over requests)", restore_wait_seconds);
    return out;
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
          res.set_content(error_body(std::string("internal error: ") + e.what(), "server_error"), "application/json");
        }
      };
    };
    svr.Post("/v1/chat/completions", guarded([this](const httplib::Request& q, httplib::Response& r) { on_chat(q, r); }));
    svr.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& r) {
              json m = {{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "chorus"}};
              r.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
            }));
    svr.Get("/programs", guarded([this](const httplib::Request&, httplib::Response& r) {
              r.set_content(programs_json().dump(), "application/json");
            }));
    svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
              r.set_content(metrics_text(), "text/plain; version=0.0.4");
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
               {
                 std::lock_guard<std::mutex> l(m);
                 auto it = sessions.find(id);
                 if (it == sessions.end() || it->second.ephemeral)
                   throw HttpError{404, error_body("no program `" + id + "`", "invalid_request_error", "program_id",
                                                   "program_not_found")};
                 if (it->second.busy || it->second.moving)
                   throw HttpError{409, error_body("program `" + id + "` has a request in flight", "invalid_request_error",
                                                   "program_id", "program_busy")};
               }
               release(id);
               r.set_content(json{{"program_id", id}, {"released", true}}.dump(), "application/json");
             }));
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413)
        res.set_content(error_body("the request body is too large", "invalid_request_error"), "application/json");
      else if (res.status == 404)
        res.set_content(error_body("no route " + req.method + " " + req.path, "invalid_request_error"), "application/json");
      else
        res.set_content(error_body("HTTP " + std::to_string(res.status), "invalid_request_error"), "application/json");
    });
  }
};

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { stop(); }

int Gateway::port() const { return impl_->port; }

Result<std::unique_ptr<Gateway>> Gateway::start(caf::actor_system& sys, caf::actor batcher, const Model& model,
                                                GatewayOptions opts) {
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->batcher = std::move(batcher);
  impl->model = &model;
  impl->model_name = opts.model_name.empty() ? model.config.name : opts.model_name;
  impl->policy = ProgramPolicy(opts.policy);
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
      return make_error(Errc::io, "gateway: cannot bind " + p->opts.host + ":" + std::to_string(p->opts.port));
    p->port = p->opts.port;
  }
  p->http = std::thread([p] { p->svr.listen_after_bind(); });
  p->sched = std::thread([p] { p->scheduler_loop(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::stop() {
  if (!impl_ || !impl_->http.joinable()) return;
  {
    std::lock_guard<std::mutex> l(impl_->m);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->svr.stop();
  impl_->http.join();
  impl_->sched.join();
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> l(impl_->m);
    for (const auto& [id, s] : impl_->sessions) ids.push_back(id);
  }
  for (const auto& id : ids) impl_->release(id);
}

}  // namespace chorus
