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
#include "actors/program_manager.h"
#include "actors/submit.h"
#include "engine/forward/kv_cache.h"
#include "engine/sched/program_policy.h"
#include "gateway/metrics_server.h"
#include "gateway/openai_request.h"

namespace chorus {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

}  // namespace

// One program of the gateway: one block holding its conversation. (Outside the anonymous
// namespace: GatewayPrograms::Impl holds them, and a unity build includes this file.)
struct GatewaySession {
  std::string id;
  uint64_t program = 0;  // its id in the memory actor and the scheduler
  BlockId block = -1;
  std::string text;        // what the block holds, as text
  int64_t tokens = 0;      // tokens in the block
  bool ephemeral = false;  // no program_id: released after its request
  bool busy = false;       // a request in flight
  uint64_t waiting = 0;    // busy: the request id of its command waiting in admit() (0: none)
  double phase_since = 0;  // busy: when the request began; idle: when the last one ended
  double last_used = 0;
  int64_t requests = 0;
  std::deque<uint64_t> queued;  // tickets of the turns that wait for it to be idle, first first
};

HttpError program_not_found(const std::string& id) {
  return HttpError{
      404, error_body("no program `" + id + "`", "invalid_request_error", "program_id", "program_not_found")};
}

struct GatewayPrograms::Impl {
  caf::actor_system* sys = nullptr;
  caf::actor batcher;
  GatewayOptions opts;
  std::unique_ptr<ProgramManager> own_scheduler;  // when the node gave none
  ProgramManager* scheduler = nullptr;
  std::thread lease;  // expires idle programs

  mutable std::mutex m;
  std::condition_variable cv;
  std::condition_variable turn_cv;  // a program is idle again, or gone: queued turns look
  uint64_t next_ticket = 1;
  std::map<std::string, GatewaySession> sessions;
  uint64_t next_anon = 1;
  uint64_t next_request = 1;  // request ids of the commands admit() sends
  bool stopping = false;
  std::function<bool(int64_t pages)> room_elsewhere;  // the global queue's test (several backends)

  // Metrics.
  std::atomic<int64_t> prompt_tokens{0}, completion_tokens{0}, reused_tokens{0}, recomputed_tokens{0};
  std::atomic<int64_t> requests{0};
  // Where a request's time goes (guarded by m): all of it, from arrival to its end, and the part
  // spent waiting for its program to be restored or for room. Their ratio says how much the
  // scheduling costs; the first over the wall time is the mean number of requests in flight.
  double request_seconds = 0, restore_wait_seconds = 0;
  std::deque<double> recent;  // end times of requests in the last minute (under m)
  Clock::time_point t0 = Clock::now();

  double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  Result<Reply> call(const Frame& f) const {
    caf::scoped_actor self{*sys};
    return ask(self, batcher, f, std::chrono::seconds(600));
  }

  // A program for a new session: registered with `hold` (its requests wait while it is paused),
  // its block made, paused while the block is empty (nothing to move) and scheduled: its first
  // request waits until the scheduler admits it, like a paused program's.
  Result<std::pair<uint64_t, BlockId>> new_program(const std::string& key) {
    const uint64_t program = scheduler->new_program_id();
    ProgramCmd reg = ProgramCmd::of(ProgramCmd::Op::register_program, program);
    reg.name = key;
    reg.hold = true;
    if (auto r = call(encode_program(0, reg)); !r) return r.error();
    auto b = call(encode_create_block(0, key, program));
    Result<Reply> paused = b ? call(encode_program(0, ProgramCmd::of(ProgramCmd::Op::pause, program)))
                             : Result<Reply>(b.error());
    if (!paused || !scheduler->add(program, 0)) {
      terminate(program);
      return paused ? make_error(Errc::internal, "the scheduler is stopping") : paused.error();
    }
    return std::pair{program, static_cast<BlockId>(b->id)};
  }

  // Program `e`, found on the node, becomes a session: its block's log read back into the text
  // it holds, kept in host memory until its next request, scheduled. Returns its tokens; an
  // error says why it is not taken over (then nothing of it changed).
  Result<int64_t> take_over(const ProgramEntryData& e, const Tokenizer& tokenizer,
                            const std::function<bool(const std::string& id)>& elsewhere) {
    if (!e.hold || e.blocks.size() != 1 || e.name.empty() || e.name.rfind("anon-", 0) == 0)
      return make_error(Errc::unsupported, "not an HTTP program of a program_id");
    {
      std::lock_guard<std::mutex> l(m);
      if (sessions.count(e.name))
        return make_error(Errc::invalid_argument, "a program of that id is here already");
    }
    if (elsewhere(e.name)) return make_error(Errc::invalid_argument, "it runs on another node now");
    CHORUS_ASSIGN_OR_RETURN(const Reply log, call(encode_snapshot_view(0, e.blocks, true)));
    if (log.blocks.size() != 1) return make_error(Errc::internal, "its block was not read back");
    if (e.state == ProgramState::active)
      CHORUS_TRY(
          call(encode_program(0, ProgramCmd::of(ProgramCmd::Op::pause, e.program, PauseMode::offload))));
    if (!scheduler->add(e.program, 0)) return make_error(Errc::internal, "the scheduler is stopping");
    GatewaySession s;
    s.id = e.name;
    s.program = e.program;
    s.block = e.blocks.front();
    s.text = tokenizer.decode(log.blocks.front().log, {.render_special = true});
    s.tokens = static_cast<int64_t>(log.blocks.front().log.size());
    s.phase_since = s.last_used = now();
    {
      std::lock_guard<std::mutex> l(m);
      sessions[e.name] = std::move(s);
    }
    scheduler->tool_started(e.program);  // between two requests: its client acts
    return static_cast<int64_t>(log.blocks.front().log.size());
  }

  void terminate(uint64_t program) {
    if (auto r = call(encode_program(0, ProgramCmd::of(ProgramCmd::Op::terminate, program))); !r)
      spdlog::warn("gateway: ending program {}: {}", program, r.error().message);
  }

  // The session for `id` (created, with its program and block, when new). Under no lock.
  Result<std::string> open_session(const std::string& id) {
    std::unique_lock<std::mutex> l(m);
    if (!id.empty() && sessions.count(id)) return id;
    const std::string key = id.empty() ? "anon-" + std::to_string(next_anon++) : id;
    l.unlock();
    auto made = new_program(key);
    if (!made) return made.error();
    l.lock();
    if (sessions.count(key)) {  // another request created it meanwhile: that one is the program
      l.unlock();
      scheduler->remove(made->first);
      terminate(made->first);
      return key;
    }
    GatewaySession s;
    s.id = key;
    s.program = made->first;
    s.block = made->second;
    s.ephemeral = id.empty();
    s.phase_since = s.last_used = now();
    sessions[key] = std::move(s);
    return key;
  }

  // Ends a program: no longer scheduled, its blocks freed. Under no lock; the session must not
  // be busy.
  void release(const std::string& id) {
    uint64_t program = 0;
    {
      std::lock_guard<std::mutex> l(m);
      auto it = sessions.find(id);
      if (it == sessions.end()) return;
      program = it->second.program;
      sessions.erase(it);
    }
    turn_cv.notify_all();
    scheduler->remove(program);
    terminate(program);
    scheduler->check_now();  // its room may let another program in
  }

  // A turn of a program with one in flight waits behind it, and behind the turns that came
  // before it (FIFO, one writer per block): at most kQueuedTurns wait, each for restore_wait_s at
  // most, else a 429 (program_busy). Under `l`; the session once it is this turn's.
  static constexpr size_t kQueuedTurns = 8;
  GatewaySession& wait_turn(std::unique_lock<std::mutex>& l, const std::string& id) {
    GatewaySession* s = &sessions.at(id);
    if (s->queued.size() >= kQueuedTurns)
      throw HttpError{429, error_body("program `" + id + "` has a request in flight and " +
                                          std::to_string(kQueuedTurns) + " more waiting (the limit)",
                                      "invalid_request_error", "program_id", "program_busy")};
    const uint64_t ticket = next_ticket++;
    s->queued.push_back(ticket);
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(opts.restore_wait_s));
    for (;;) {
      auto it = sessions.find(id);
      if (it == sessions.end()) throw program_not_found(id);  // released while it waited
      s = &it->second;
      if (!s->busy && s->queued.front() == ticket) {
        s->queued.pop_front();
        return *s;
      }
      if (stopping || turn_cv.wait_until(l, until) == std::cv_status::timeout) {
        if (auto again = sessions.find(id); again != sessions.end()) std::erase(again->second.queued, ticket);
        turn_cv.notify_all();  // the turn behind it may go first now
        throw HttpError{429,
                        error_body("program `" + id + "`: waited " + std::to_string(opts.restore_wait_s) +
                                       " s for the requests before this one to end",
                                   "invalid_request_error", "program_id", "program_busy")};
      }
    }
  }

  // The request is over before it ran: the program acts again (a one-shot one is released).
  [[noreturn]] void give_up(const std::string& id, const HttpError& why) {
    settle(id);
    throw why;
  }
  void settle(const std::string& id) {
    bool ephemeral = false;
    uint64_t program = 0;
    {
      std::lock_guard<std::mutex> l(m);
      if (auto it = sessions.find(id); it != sessions.end()) {
        GatewaySession& s = it->second;
        s.busy = false;
        s.waiting = 0;
        turn_cv.notify_all();
        request_seconds += now() - s.phase_since;  // phase_since: when the request arrived
        s.phase_since = s.last_used = now();
        ephemeral = s.ephemeral;
        program = s.program;
      }
    }
    if (ephemeral)
      release(id);  // nobody can ask for it again
    else if (program != 0)
      scheduler->tool_started(program);  // its client acts
  }

  void lease_loop() {
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
          if (!s.busy && t - s.last_used > opts.lease_s) expired.push_back(id);
      }
      for (const auto& id : expired) release(id);
    }
  }
};

GatewayPrograms::GatewayPrograms(caf::actor_system& sys, caf::actor batcher, const GatewayOptions& opts,
                                 ProgramManager* scheduler, uint64_t first_program_id)
    : impl_(std::make_unique<Impl>()) {
  impl_->sys = &sys;
  impl_->batcher = batcher;
  impl_->opts = opts;
  if (!scheduler) {
    SchedulerOptions so;
    so.policy = opts.policy;
    so.mode = opts.mode;
    so.ttl_s = opts.ttl_s;
    so.first_program_id = first_program_id;
    impl_->own_scheduler = std::make_unique<ProgramManager>(sys, std::move(batcher), so);
    scheduler = impl_->own_scheduler.get();
  }
  impl_->scheduler = scheduler;
  Impl* p = impl_.get();
  impl_->lease = std::thread([p] { p->lease_loop(); });
}

std::vector<std::string> GatewayPrograms::adopt(const std::vector<ProgramEntryData>& found,
                                                const Tokenizer& tokenizer,
                                                const std::function<bool(const std::string& id)>& elsewhere) {
  std::vector<std::string> adopted;
  for (const ProgramEntryData& e : found) {
    if (auto tokens = impl_->take_over(e, tokenizer, elsewhere)) {
      spdlog::info("gateway: took over program `{}` ({} tokens in its block) from a predecessor", e.name,
                   *tokens);
      adopted.push_back(e.name);
    } else {
      ProgramCmd end = ProgramCmd::of(ProgramCmd::Op::terminate, e.program);
      end.cancel = true;  // a request its predecessor left running ends with it
      const auto r = impl_->call(encode_program(0, end));
      spdlog::info("gateway: program {} (`{}`) left by a predecessor is not taken over ({}): terminated{}",
                   e.program, e.name, tokens.error().message, r ? "" : " (" + r.error().message + ")");
    }
  }
  return adopted;
}

caf::actor GatewayPrograms::memory() const {
  return impl_->batcher;
}
ProgramManager* GatewayPrograms::scheduler() const {
  return impl_->scheduler;
}

GatewayPrograms::~GatewayPrograms() {
  stop();
}

void GatewayPrograms::stop_waiting() {
  std::vector<std::pair<uint64_t, uint64_t>> waiting;  // (program, request)
  {
    std::lock_guard<std::mutex> l(impl_->m);
    impl_->stopping = true;
    for (const auto& [id, s] : impl_->sessions)
      if (s.waiting) waiting.emplace_back(s.program, s.waiting);
  }
  impl_->cv.notify_all();
  impl_->turn_cv.notify_all();  // queued turns give up: the gateway stops
  for (const auto& [program, request] : waiting) {
    ProgramCmd w = ProgramCmd::of(ProgramCmd::Op::withdraw, program);
    w.request = request;
    caf::anon_send(impl_->batcher, frame_atom::value, encode_program(0, w));
  }
}

void GatewayPrograms::stop() {
  if (!impl_->lease.joinable()) return;
  stop_waiting();
  impl_->lease.join();
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
  uint64_t program = 0;
  Turn turn;
  {
    std::unique_lock<std::mutex> l(impl_->m);
    GatewaySession* sp = &impl_->sessions.at(*id);
    if (sp->busy || !sp->queued.empty()) sp = &impl_->wait_turn(l, *id);
    GatewaySession& s = *sp;
    s.busy = true;  // from here on its text and tokens are this request's to change
    s.phase_since = impl_->now();
    ++s.requests;
    program = s.program;
    turn = Turn{*id, s.block, s.text, s.tokens, s.ephemeral, s.program};
  }
  impl_->scheduler->tool_ended(program);  // its client's tools are done: a request boundary
  return turn;
}

Result<Reply> GatewayPrograms::admit(caf::scoped_actor& self, const std::string& id, int64_t need_tokens,
                                     const std::function<Frame(uint64_t)>& make, bool may_move) {
  Impl& g = *impl_;
  const int64_t capacity = g.scheduler->options().policy.capacity_pages;
  const int64_t need_pages = KvCache::pages_for(need_tokens);
  if (need_pages > capacity)  // it would wait for ever, or run out half-way
    g.give_up(
        id, HttpError{400, error_body("the conversation and max_tokens need " + std::to_string(need_tokens) +
                                          " tokens (" + std::to_string(need_pages) +
                                          " KV pages); the server's pool has " + std::to_string(capacity) +
                                          " pages",
                                      "invalid_request_error", "max_tokens", "context_length_exceeded")});
  const HttpError paused{
      503, error_body("program `" + id + "` could not be restored in time (memory is full)", "server_error",
                      "", "program_paused")};
  // With the global queue, the wait is cut in slices of migrate_after_s: after each, the request
  // moves if another backend has room for it, else it waits here again.
  const bool global = may_move && g.opts.migrate_after_s > 0 && g.room_elsewhere;
  const double slice =
      global ? std::min(g.opts.migrate_after_s, g.opts.restore_wait_s) : g.opts.restore_wait_s;
  const double from = g.now();
  while (true) {
    uint64_t program = 0, request = 0;
    {
      std::lock_guard<std::mutex> l(g.m);
      GatewaySession& s = g.sessions.at(id);
      request = s.waiting = g.next_request++;
      program = s.program;
      if (g.stopping) request = 0;
    }
    if (request == 0) g.give_up(id, paused);
    // Taken back if it still waits then (one that started by then runs on: the withdraw finds
    // nothing).
    ProgramCmd withdraw = ProgramCmd::of(ProgramCmd::Op::withdraw, program);
    withdraw.request = request;
    const double wait = std::min(slice, std::max(0.001, g.opts.restore_wait_s - (g.now() - from)));
    const double sent = g.now();  // (a withdrawn request is told by its reply's code, Errc::withdrawn)
    caf::delayed_anon_send(g.batcher, std::chrono::microseconds(static_cast<int64_t>(wait * 1e6)),
                           frame_atom::value, encode_program(0, withdraw));
    Result<Reply> r = ask(self, g.batcher, make(request));
    bool withdrawn = false, expired = false;
    {
      std::lock_guard<std::mutex> l(g.m);
      const double t = g.now();
      g.restore_wait_seconds += t - sent;
      withdrawn = !r && r.error().code == Errc::withdrawn;
      expired = g.stopping || t - from >= g.opts.restore_wait_s;
      if (auto it = g.sessions.find(id); it != g.sessions.end()) it->second.waiting = 0;
    }
    if (!withdrawn) return r;
    if (expired || !global) g.give_up(id, paused);
    if (g.room_elsewhere(need_pages)) {
      g.settle(id);
      return make_error(Errc::withdrawn, "waited " + std::to_string(g.now() - from) +
                                             " s here, and another backend has room for it now");
    }
  }
}

void GatewayPrograms::set_room_elsewhere(std::function<bool(int64_t pages)> test) {
  impl_->room_elsewhere = std::move(test);
}

void GatewayPrograms::set_block(const std::string& id, BlockId block) {
  std::lock_guard<std::mutex> l(impl_->m);
  if (auto it = impl_->sessions.find(id); it != impl_->sessions.end()) it->second.block = block;
}

void GatewayPrograms::set_contents(const std::string& id, std::string text, int64_t tokens) {
  std::lock_guard<std::mutex> l(impl_->m);
  auto it = impl_->sessions.find(id);
  if (it == impl_->sessions.end()) return;  // released meanwhile (the gateway stops)
  it->second.text = std::move(text);
  it->second.tokens = tokens;
}

void GatewayPrograms::end(const std::string& id) {
  Impl& g = *impl_;
  bool ephemeral = false;
  uint64_t program = 0;
  {
    std::lock_guard<std::mutex> l(g.m);
    auto it = g.sessions.find(id);
    if (it == g.sessions.end()) return;
    GatewaySession& s = it->second;
    s.busy = false;
    g.turn_cv.notify_all();
    g.request_seconds += g.now() - s.phase_since;  // phase_since: when the request arrived
    s.phase_since = s.last_used = g.now();
    ephemeral = s.ephemeral;
    program = s.program;
    g.recent.push_back(g.now());
    while (!g.recent.empty() && g.recent.front() < g.now() - 60) g.recent.pop_front();
    ++g.requests;
  }
  if (ephemeral)
    g.release(id);
  else
    g.scheduler->tool_started(program);  // its client acts (runs its tools) until the next request
}

void GatewayPrograms::release_by_client(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    auto it = impl_->sessions.find(id);
    if (it == impl_->sessions.end() || it->second.ephemeral) throw program_not_found(id);
    if (it->second.busy)
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

int64_t GatewayPrograms::demand_pages() const {
  std::lock_guard<std::mutex> l(impl_->m);
  int64_t pages = 0;
  for (const auto& [id, s] : impl_->sessions) pages += KvCache::pages_for(s.tokens);
  return pages;
}

int64_t GatewayPrograms::capacity_pages() const {
  return impl_->scheduler->options().policy.capacity_pages;
}

GatewayCensus GatewayPrograms::census() const {
  GatewayCensus c;
  for (const ScheduledProgram& p : impl_->scheduler->programs()) ++(p.paused ? c.paused : c.resident);
  std::lock_guard<std::mutex> l(impl_->m);
  for (const auto& [id, s] : impl_->sessions) c.waiting += s.waiting != 0;
  return c;
}

json GatewayPrograms::list() const {
  const Impl& g = *impl_;
  std::map<uint64_t, ScheduledProgram> seen;  // as the scheduler last saw them
  for (const ScheduledProgram& p : g.scheduler->programs()) seen[p.id] = p;
  std::lock_guard<std::mutex> l(g.m);
  json list = json::array();
  const double t = g.now();
  for (const auto& [id, s] : g.sessions) {
    if (s.ephemeral) continue;
    const ScheduledProgram& p = seen[s.program];
    list.push_back({{"program_id", id},
                    {"tokens", s.tokens},
                    {"pages", KvCache::pages_for(s.tokens)},
                    {"state", p.paused ? (p.offloaded ? "paused (offloaded)" : "paused") : "active"},
                    {"phase", s.busy ? "reasoning" : "acting"},
                    {"idle_s", s.busy ? 0.0 : t - s.last_used},
                    {"requests", s.requests}});
  }
  return json{{"object", "list"}, {"data", list}};
}

std::string GatewayPrograms::metrics_text() const {
  const Impl& g = *impl_;
  // The pool and its programs as the node's scheduler sees them: every program it schedules
  // (HTTP ones and any others on the node), as of its last check.
  const ProgramManagerStats st = g.scheduler->stats();
  // The pool itself, now (the memory actor answers a Heartbeat with its pages in use).
  const Result<Reply> pool = g.call(encode_heartbeat(0, "", 0, 0));
  int64_t paused = 0, active = 0;
  for (const ScheduledProgram& p : g.scheduler->programs()) ++(p.paused ? paused : active);
  const int64_t resident = st.resident_pages;
  std::lock_guard<std::mutex> l(g.m);
  const double reused = static_cast<double>(g.reused_tokens.load());
  // Prefilled again: restores of dropped programs, and histories that changed.
  const double recomputed = static_cast<double>(g.recomputed_tokens.load() + st.recomputed_tokens);
  const double hit = reused + recomputed > 0 ? reused / (reused + recomputed) : 1.0;
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    append_metric(out, name, type, help, v);
  };
  metric("chorus_resident_pages", "gauge", "KV pages held by the scheduled programs (at the last check)",
         static_cast<double>(resident));
  metric("chorus_capacity_pages", "gauge", "KV pages the programs share",
         static_cast<double>(g.scheduler->options().policy.capacity_pages));
  if (pool && pool->kind == ReplyKind::heartbeat)
    metric("chorus_pool_used_pages", "gauge", "KV pages of the node's pool in use now (shared pages once)",
           static_cast<double>(pool->pages));
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
  metric("chorus_pauses_total", "counter", "programs paused", static_cast<double>(st.pauses));
  metric("chorus_restores_total", "counter", "programs restored", static_cast<double>(st.restores));
  metric("chorus_request_seconds_total", "counter",
         "seconds requests took, arrival to end (summed over requests)", g.request_seconds);
  metric("chorus_restore_wait_seconds_total", "counter",
         "seconds requests waited for their program's restore or for room (summed over requests)",
         g.restore_wait_seconds);
  return out;
}

}  // namespace chorus
