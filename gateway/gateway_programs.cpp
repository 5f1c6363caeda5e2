#include "gateway/gateway_programs.h"

#include <spdlog/spdlog.h>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/atoms.h"
#include "actors/submit.h"
#include "engine/forward/kv_cache.h"
#include "engine/sched/program_policy.h"
#include "gateway/openai_request.h"

namespace chorus {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One program of the gateway: one block holding its conversation.
struct Session {
  std::string id;
  uint64_t program = 0;  // the batcher's program id
  BlockId block = -1;
  std::string text;        // what the block holds, as text
  int64_t tokens = 0;      // tokens in the block
  bool ephemeral = false;  // no program_id: released after its request
  bool busy = false;       // a request in flight (or waiting to be restored)
  bool started = false;    // busy, and running in the engine: its room is taken, it is not to be paused
  bool paused = false;
  bool offloaded = false;
  bool moving = false;                // a pause or restore is under way
  bool release_when_settled = false;  // released while moving: release once the move is done
  double phase_since = 0;             // busy: when the request began; idle: when the last one ended
  double paused_since = 0;
  double last_used = 0;
  int64_t requests = 0;
  int64_t need_tokens = 0;  // busy: what the request in flight may fill (prompt + max_tokens)
};

}  // namespace

struct GatewayPrograms::Impl {
  caf::actor_system* sys = nullptr;
  caf::actor batcher;
  GatewayOptions opts;
  ProgramPolicy policy{ProgramPolicyOptions{}};
  std::thread sched;

  mutable std::mutex m;
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

  Result<Reply> call(const Frame& f) {
    caf::scoped_actor self{*sys};
    return ask(self, batcher, f, std::chrono::seconds(600));
  }

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
    if (sessions.count(key)) {  // another request created it meanwhile: that one is the program
      l.unlock();
      ProgramCmd t{ProgramCmd::Op::terminate, program, "", {}, PauseMode::drop};
      (void)call(encode_program(0, t));
      return key;
    }
    Session s;
    s.id = key;
    s.program = program;
    s.block = static_cast<BlockId>(b->id);
    s.ephemeral = id.empty();
    s.phase_since = s.last_used = now();
    sessions[key] = std::move(s);
    return key;
  }

  // Ends a program: its blocks are freed. Under no lock; the session must not be busy. One that
  // a decision is pausing or restoring right now is released when that is done (carry_out).
  void release(const std::string& id) {
    uint64_t program = 0;
    {
      std::lock_guard<std::mutex> l(m);
      auto it = sessions.find(id);
      if (it == sessions.end()) return;
      if (it->second.moving) {
        it->second.release_when_settled = true;
        return;
      }
      program = it->second.program;
      sessions.erase(it);
    }
    ProgramCmd t{ProgramCmd::Op::terminate, program, "", {}, PauseMode::drop};
    if (auto r = call(encode_program(0, t)); !r)
      spdlog::warn("gateway: releasing program {}: {}", id, r.error().message);
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
        p.pages = KvCache::pages_for(
            std::max(s.tokens, s.busy ? s.need_tokens : 0));  // room for the request in flight
        p.state = s.paused ? ProgramState::paused : ProgramState::active;
        p.phase = s.busy ? ProgramPhase::reasoning : ProgramPhase::acting;
        p.phase_since = s.phase_since;
        p.paused_since = s.paused_since;
        p.offloaded = s.offloaded;
        p.tools_warm = true;
        // A request waiting to start (its program new, paused, or short of room for what it will
        // add) is reasoning but not pinned: the policy may keep it out until its room is there.
        p.pinned = s.started;
        by_program[s.program] = id;
        snaps.push_back(p);
      }
      const PolicyDecision d =
          opts.mode == SchedulingMode::program
              ? policy.decide(t, snaps)
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
      bool empty;
      {
        std::lock_guard<std::mutex> l(m);
        const Session& s = sessions.at(id);
        program = s.program;
        empty = s.tokens == 0;
      }
      // A program whose block is still empty (new, or cleared) has no pages to move.
      Result<Reply> r = Reply{};
      if (!empty) r = call(encode_program(0, ProgramCmd{op, program, "", {}, mode}));
      std::unique_lock<std::mutex> l(m);
      Session& s = sessions.at(id);  // not erased while moving (release() waits for this)
      s.moving = false;
      if (s.release_when_settled) {
        l.unlock();
        release(id);
        return;
      }
      if (!r) {
        spdlog::warn("gateway: {} program {}: {}", op == ProgramCmd::Op::pause ? "pausing" : "restoring", id,
                     r.error().message);
        return;
      }
      if (op == ProgramCmd::Op::pause) {
        s.paused = true;
        s.offloaded = !empty && mode == PauseMode::offload;
        s.paused_since = now();
        if (!empty) ++pauses;
      } else {
        if (!s.offloaded) recomputed_tokens += s.tokens;  // a dropped program is prefilled again
        s.paused = false;
        s.offloaded = false;
        if (!empty) ++restores;
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
};

GatewayPrograms::GatewayPrograms(caf::actor_system& sys, caf::actor batcher, const GatewayOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  impl_->sys = &sys;
  impl_->batcher = std::move(batcher);
  impl_->opts = opts;
  impl_->policy = ProgramPolicy(opts.policy);
  Impl* p = impl_.get();
  impl_->sched = std::thread([p] { p->scheduler_loop(); });
}

GatewayPrograms::~GatewayPrograms() {
  stop();
}

void GatewayPrograms::stop_waiting() {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
}

void GatewayPrograms::stop() {
  if (!impl_->sched.joinable()) return;
  stop_waiting();
  impl_->sched.join();
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> l(impl_->m);
    for (const auto& [id, s] : impl_->sessions) ids.push_back(id);
  }
  for (const auto& id : ids) impl_->release(id);
}

Result<Reply> GatewayPrograms::call(const Frame& f) {
  return impl_->call(f);
}

GatewayPrograms::Turn GatewayPrograms::begin(const std::string& program_id) {
  auto id = impl_->open_session(program_id);
  if (!id)
    throw HttpError{500, error_body("cannot create the program: " + id.error().message, "server_error")};
  std::lock_guard<std::mutex> l(impl_->m);
  Session& s = impl_->sessions.at(*id);
  if (s.busy)
    throw HttpError{409, error_body("program `" + *id + "` already has a request in flight",
                                    "invalid_request_error", "program_id", "program_busy")};
  s.busy = true;  // from here on its text and tokens are this request's to change
  s.phase_since = impl_->now();
  ++s.requests;
  return Turn{*id, s.block, s.text, s.tokens, s.ephemeral};
}

void GatewayPrograms::wait_to_run(const std::string& id, int64_t need_tokens) {
  Impl& g = *impl_;
  // The request is over before it ran: the program acts again (a one-shot one is released).
  auto give_up = [&](std::unique_lock<std::mutex>& l, const HttpError& why) {
    bool ephemeral = false;
    if (auto it = g.sessions.find(id); it != g.sessions.end()) {
      Session& s = it->second;
      s.busy = s.started = false;
      g.request_seconds += g.now() - s.phase_since;  // phase_since: when the request arrived
      s.phase_since = s.last_used = g.now();
      ephemeral = s.ephemeral;
    }
    l.unlock();
    if (ephemeral) g.release(id);  // nobody can ask for it again
    throw why;
  };
  std::unique_lock<std::mutex> l(g.m);
  const int64_t need_pages = KvCache::pages_for(need_tokens);
  if (need_pages > g.opts.policy.capacity_pages)  // it would wait for ever, or run out half-way
    give_up(l,
            HttpError{400, error_body("the conversation and max_tokens need " + std::to_string(need_tokens) +
                                          " tokens (" + std::to_string(need_pages) +
                                          " KV pages); the server's pool has " +
                                          std::to_string(g.opts.policy.capacity_pages) + " pages",
                                      "invalid_request_error", "max_tokens", "context_length_exceeded")});
  g.sessions.at(id).need_tokens = need_tokens;
  l.unlock();
  g.schedule();  // a request boundary, with this request's room counted
  l.lock();
  const double wait_from = g.now();
  // It starts once its program is resident and the policy has not moved it out to make room
  // (the decision above counted its room): from then on it is pinned.
  const bool ready = g.cv.wait_for(l, std::chrono::duration<double>(g.opts.restore_wait_s), [&] {
    auto it = g.sessions.find(id);
    if (g.stopping || it == g.sessions.end()) return true;
    if (it->second.paused || it->second.moving) return false;
    it->second.started = true;
    return true;
  });
  g.restore_wait_seconds += g.now() - wait_from;
  if (ready && !g.stopping && g.sessions.count(id)) return;
  give_up(l, HttpError{503, error_body("program `" + id + "` could not be restored in time (memory is full)",
                                       "server_error", "", "program_paused")});
}

void GatewayPrograms::set_contents(const std::string& id, std::string text, int64_t tokens) {
  std::lock_guard<std::mutex> l(impl_->m);
  Session& s = impl_->sessions.at(id);
  s.text = std::move(text);
  s.tokens = tokens;
}

void GatewayPrograms::end(const std::string& id) {
  Impl& g = *impl_;
  bool ephemeral = false;
  {
    std::lock_guard<std::mutex> l(g.m);
    auto it = g.sessions.find(id);
    if (it == g.sessions.end()) return;
    Session& s = it->second;
    s.busy = s.started = false;
    g.request_seconds += g.now() - s.phase_since;  // phase_since: when the request arrived
    s.phase_since = s.last_used = g.now();
    ephemeral = s.ephemeral;
    g.recent.push_back(g.now());
    while (!g.recent.empty() && g.recent.front() < g.now() - 60) g.recent.pop_front();
    ++g.requests;
  }
  if (ephemeral) g.release(id);
  g.schedule();  // a request boundary
}

void GatewayPrograms::release_by_client(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    auto it = impl_->sessions.find(id);
    if (it == impl_->sessions.end() || it->second.ephemeral)
      throw HttpError{404, error_body("no program `" + id + "`", "invalid_request_error", "program_id",
                                      "program_not_found")};
    if (it->second.busy || it->second.moving)
      throw HttpError{409, error_body("program `" + id + "` has a request in flight", "invalid_request_error",
                                      "program_id", "program_busy")};
  }
  impl_->release(id);
}

void GatewayPrograms::count(int64_t prompt, int64_t completion, int64_t reused, int64_t recomputed) {
  impl_->prompt_tokens += prompt;
  impl_->completion_tokens += completion;
  impl_->reused_tokens += reused;
  impl_->recomputed_tokens += recomputed;
}

int64_t GatewayPrograms::requests_served() const {
  return impl_->requests.load();
}

json GatewayPrograms::list() const {
  const Impl& g = *impl_;
  std::lock_guard<std::mutex> l(g.m);
  json list = json::array();
  const double t = g.now();
  for (const auto& [id, s] : g.sessions) {
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

std::string GatewayPrograms::metrics_text() const {
  const Impl& g = *impl_;
  std::lock_guard<std::mutex> l(g.m);
  int64_t resident = 0, paused = 0, active = 0;
  for (const auto& [id, s] : g.sessions) {
    if (s.paused)
      ++paused;
    else {
      ++active;
      resident += KvCache::pages_for(s.tokens);
    }
  }
  const double reused = static_cast<double>(g.reused_tokens.load());
  const double recomputed = static_cast<double>(g.recomputed_tokens.load());
  const double hit = reused + recomputed > 0 ? reused / (reused + recomputed) : 1.0;
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
  };
  metric("chorus_resident_pages", "gauge", "KV pages held by active programs", static_cast<double>(resident));
  metric("chorus_capacity_pages", "gauge", "KV pages the programs share",
         static_cast<double>(g.opts.policy.capacity_pages));
  metric("chorus_active_programs", "gauge", "programs with their KV resident", static_cast<double>(active));
  metric("chorus_paused_programs", "gauge", "programs paused (KV dropped or offloaded)",
         static_cast<double>(paused));
  metric("chorus_reused_tokens_total", "counter", "prompt tokens found in a program's block", reused);
  metric("chorus_recomputed_tokens_total", "counter",
         "tokens prefilled again (restored after a drop, or history changed)", recomputed);
  metric("chorus_kv_hit_rate", "gauge", "reused / (reused + recomputed)", hit);
  metric("chorus_prompt_tokens_total", "counter", "prompt tokens run",
         static_cast<double>(g.prompt_tokens.load()));
  metric("chorus_completion_tokens_total", "counter", "tokens generated",
         static_cast<double>(g.completion_tokens.load()));
  metric("chorus_requests_total", "counter", "chat completions served",
         static_cast<double>(g.requests.load()));
  metric("chorus_requests_per_minute", "gauge", "chat completions in the last minute",
         static_cast<double>(g.recent.size()));
  metric("chorus_pauses_total", "counter", "programs paused", static_cast<double>(g.pauses.load()));
  metric("chorus_restores_total", "counter", "programs restored", static_cast<double>(g.restores.load()));
  metric("chorus_request_seconds_total", "counter",
         "seconds requests took, arrival to end (summed over requests)", g.request_seconds);
  metric("chorus_restore_wait_seconds_total", "counter",
         "seconds requests waited for their program to be restored (summed over requests)",
         g.restore_wait_seconds);
  return out;
}

}  // namespace chorus
