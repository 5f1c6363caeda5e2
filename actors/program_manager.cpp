#include "actors/program_manager.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "actors/atoms.h"
#include "actors/submit.h"

namespace chorus {

namespace {

ProgramCmd command(ProgramCmd::Op op, uint64_t program, PauseMode mode = PauseMode::drop) {
  ProgramCmd c;
  c.op = op;
  c.program = program;
  c.mode = mode;
  return c;
}

struct Managed {
  int tools = 0;           // its tool calls running now
  double tool_since = 0;   // when the first of them started
  bool admitted = false;   // resident at least once
  int64_t need_pages = 0;  // until admitted: what its start takes
  int64_t pages = 0;       // active: at the last check; paused: when it was paused
  int64_t tokens = 0;      // the same, in tokens
  bool offloaded = false;  // paused: its pages are in host memory
  double paused_since = 0;
  bool starting = true;  // its Program::start has not returned
  ProgramTools env;      // its tool environment (none: no hooks)
  bool warm = true;      // ... made
};

}  // namespace

struct ProgramManager::Impl {
  caf::actor_system& sys;
  caf::actor batcher;
  ProgramPolicy policy;
  double tool_lease_s;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();

  mutable std::mutex m;  // programs, stats, poke, stopping
  std::condition_variable cv;
  std::map<uint64_t, Managed> programs;
  ProgramManagerStats stats;
  bool poke = false, stopping = false;
  bool closed = false;  // abandon_waiting() ran

  std::mutex checking;  // one check at a time; remove() waits for the one under way
  std::thread thread;
  caf::actor listener;  // hears the batcher's (waiting_atom, program)

  void poke_now() {
    {
      std::lock_guard<std::mutex> l(m);
      poke = true;
    }
    cv.notify_all();
  }

  Impl(caf::actor_system& s, caf::actor b, ProgramPolicyOptions opts, double lease)
      : sys(s), batcher(std::move(b)), policy(opts), tool_lease_s(lease) {}

  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }

  void loop() {
    std::unique_lock<std::mutex> l(m);
    const auto period = std::chrono::duration<double>(policy.options().check_period_s);
    while (!stopping) {
      cv.wait_for(l, period, [&] { return poke || stopping; });
      if (stopping) break;
      poke = false;
      l.unlock();
      check();
      l.lock();
    }
  }

  // One program as the policy sees it, from its ProgramStatus; a paused one past the tool lease
  // is added to `cool`.
  ProgramSnapshot snapshot_of(uint64_t id, Managed& p, const Reply& st, double t,
                              std::vector<uint64_t>& cool) {
    ProgramSnapshot s;
    s.id = id;
    s.state = st.state == ProgramState::paused ? ProgramState::paused : ProgramState::active;
    if (s.state == ProgramState::active) {
      p.pages = st.pages;
      p.tokens = st.tokens;
      p.admitted = true;
    }
    // What it takes: its pages (resident, or to restore) and what its requests may still write
    // or need to start; one never admitted, at least what its start was said to take.
    s.pages = p.admitted ? p.pages + st.wanted_pages
                         : std::max(p.need_pages, static_cast<int64_t>(st.wanted_pages));
    // Reasoning while it has a request in the engine or one waiting for its restore; acting
    // otherwise: in a tool call (its pages weigh less the longer the tool runs) or waiting for
    // an event (its pages weigh fully: nothing says how long it will wait).
    const bool wants = st.pending > 0 || st.held > 0;
    s.phase = wants ? ProgramPhase::reasoning : ProgramPhase::acting;
    s.phase_since = !wants && p.tools > 0 ? p.tool_since : t;
    s.paused_since = p.paused_since;
    s.offloaded = p.offloaded;
    // Pinned: a request in the engine. One waiting for room is not: when every resident program
    // waits for room, pausing one of them is what makes it.
    s.pinned = st.pending > 0;
    // Paused, waiting for an event, no tool call, past the lease: its sandbox goes.
    if (p.env.cool && p.warm && s.state == ProgramState::paused && !wants && p.tools == 0 &&
        t - p.paused_since >= tool_lease_s) {
      cool.push_back(id);
      p.warm = false;
    }
    s.tools_warm = p.warm || !p.env.warm;
    return s;
  }

  // Where each program stands, from the memory actor (its phase told on the way): the
  // questions go out together and are answered between two steps, not one per step.
  std::vector<ProgramSnapshot> snapshots(caf::scoped_actor& self, std::map<uint64_t, Managed>& table,
                                         double t, std::vector<uint64_t>& cool, int64_t& resident) {
    using Handle = decltype(self->request(batcher, std::chrono::seconds(30), frame_atom::value, Frame{}));
    std::vector<std::pair<uint64_t, Handle>> asked;
    for (auto& [id, p] : table) {
      ProgramCmd phase = command(ProgramCmd::Op::phase, id);
      phase.acting = p.tools > 0;
      asked.emplace_back(
          id, self->request(batcher, std::chrono::seconds(30), frame_atom::value, encode_program(0, phase)));
    }
    std::vector<ProgramSnapshot> snaps;
    for (auto& [id, handle] : asked) {
      Result<Reply> st = make_error(Errc::internal, "no reply from the batcher");
      std::move(handle).receive([&](const std::vector<uint8_t>& r) { st = decode_reply(r); },
                                [&](caf::error& e) { st = make_error(Errc::internal, caf::to_string(e)); });
      if (!st || st->kind != ReplyKind::program_status) continue;  // ending: terminated under us
      snaps.push_back(snapshot_of(id, table[id], *st, t, cool));
      if (snaps.back().state == ProgramState::active) resident += st->pages;
    }
    {  // what the memory actor said stays for the next check (a paused program's pages: its last)
      std::lock_guard<std::mutex> l(m);
      for (const ProgramSnapshot& x : snaps)
        if (auto it = programs.find(x.id); it != programs.end() && x.state == ProgramState::active) {
          it->second.pages = table[x.id].pages;
          it->second.tokens = table[x.id].tokens;
          it->second.admitted = true;
        }
    }
    return snaps;
  }

  // Tool environments made again: near the head of the queue and asking for the engine (not
  // one that waits for an event), or at the restore at the latest (before the restore: the
  // program's next call may come at once). (program, ahead of its restore)
  static std::vector<std::pair<uint64_t, bool>> to_warm(const PolicyDecision& d,
                                                        const std::vector<ProgramSnapshot>& snaps,
                                                        std::map<uint64_t, Managed>& table) {
    std::vector<std::pair<uint64_t, bool>> warm;
    for (uint64_t id : d.prewarm)
      if (std::any_of(snaps.begin(), snaps.end(), [&](const ProgramSnapshot& x) {
            return x.id == id && x.phase == ProgramPhase::reasoning;
          }))
        warm.emplace_back(id, true);
    for (uint64_t id : d.restore)
      if (!table[id].warm && table[id].env.warm)  // the policy prewarms only programs it does not restore
        warm.emplace_back(id, false);
    return warm;
  }

  struct Done {  // a pause or restore carried out (or refused)
    uint64_t id;
    bool pause;
    PauseMode mode;
    bool ok;
    int64_t pages, tokens;
  };
  // Pauses first, then restores (which need the room the pauses made).
  std::vector<Done> carry_out(caf::scoped_actor& self, const PolicyDecision& d,
                              std::map<uint64_t, Managed>& table) {
    auto call = [&](const ProgramCmd& c) {
      return ask(self, batcher, encode_program(0, c), std::chrono::seconds(30));
    };
    std::vector<Done> done;
    for (const auto& [id, mode] : d.pause) {
      auto r = call(command(ProgramCmd::Op::pause, id, mode));
      if (!r) spdlog::debug("scheduler: pausing program {}: {}", id, r.error().message);
      done.push_back({id, true, mode, bool(r), table[id].pages, table[id].tokens});
    }
    for (uint64_t id : d.restore) {
      auto r = call(command(ProgramCmd::Op::restore, id));
      if (!r) spdlog::debug("scheduler: restoring program {}: {}", id, r.error().message);
      done.push_back({id, false, PauseMode::drop, bool(r), r ? r->pages : 0, table[id].tokens});
    }
    return done;
  }

  // The outcome into the table and the statistics. REQUIRES: m held.
  void account(double t, const std::vector<Done>& done) {
    for (const Done& x : done) {
      auto it = programs.find(x.id);
      if (!x.ok) ++stats.refused;
      if (!x.ok || it == programs.end()) continue;
      Managed& p = it->second;
      if (x.pause) {
        ++stats.pauses;
        if (x.mode == PauseMode::offload) ++stats.offloaded_pauses;
        p.pages = x.pages;
        p.tokens = x.tokens;
        p.offloaded = x.mode == PauseMode::offload;
        p.paused_since = t;
      } else {
        ++(p.admitted ? stats.restores : stats.admitted);
        if (p.admitted && !p.offloaded) stats.recomputed_tokens += p.tokens;
        p.admitted = true;
        p.pages = x.pages;
        p.offloaded = false;
      }
    }
  }

  void check() {
    std::lock_guard<std::mutex> one(checking);
    caf::scoped_actor self{sys};
    std::map<uint64_t, Managed> table;
    {
      std::lock_guard<std::mutex> l(m);
      table = programs;
    }
    const double t = now();
    std::vector<uint64_t> cool;  // tool environments to remove now
    int64_t resident = 0;
    const std::vector<ProgramSnapshot> snaps = snapshots(self, table, t, cool, resident);
    const PolicyDecision d = policy.decide(t, snaps);
    const std::vector<std::pair<uint64_t, bool>> warm = to_warm(d, snaps, table);
    for (uint64_t id : cool) table[id].env.cool();
    for (const auto& [id, ahead] : warm) table[id].env.warm();
    const std::vector<Done> done = carry_out(self, d, table);
    std::lock_guard<std::mutex> l(m);
    ++stats.checks;
    stats.tools_cooled += static_cast<int64_t>(cool.size());
    for (uint64_t id : cool)
      if (auto it = programs.find(id); it != programs.end()) it->second.warm = false;
    for (const auto& [id, ahead] : warm) {
      ++(ahead ? stats.tools_prewarmed : stats.tools_warmed_late);
      if (auto it = programs.find(id); it != programs.end()) it->second.warm = true;
    }
    stats.peak_resident_pages = std::max(stats.peak_resident_pages, resident);
    account(t, done);
  }
};

ProgramManager::ProgramManager(caf::actor_system& sys, caf::actor batcher, ProgramPolicyOptions opts,
                               double tool_lease_s)
    : impl_(std::make_shared<Impl>(sys, std::move(batcher), opts, tool_lease_s)) {
  if (opts.check_period_s > 0) impl_->thread = std::thread([this] { impl_->loop(); });
  // The batcher says when a scheduled program's request waits: a check then, not at the next period.
  std::weak_ptr<Impl> weak = impl_;
  impl_->listener = sys.spawn([weak](caf::event_based_actor* self) -> caf::behavior {
    if (auto impl = weak.lock()) self->send(impl->batcher, scheduler_atom::value);
    return {[weak](waiting_atom, uint64_t) {
      if (auto impl = weak.lock()) impl->poke_now();
    }};
  });
}

ProgramManager::~ProgramManager() {
  caf::anon_send_exit(impl_->listener, caf::exit_reason::user_shutdown);
  {
    std::lock_guard<std::mutex> l(impl_->m);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool ProgramManager::add(uint64_t program, int64_t need_pages, ProgramTools tools) {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    if (impl_->closed) return false;
    Managed& p = impl_->programs[program];
    p.need_pages = need_pages;
    p.env = std::move(tools);
    p.paused_since = impl_->now();
  }
  check_now();
  return true;
}

void ProgramManager::started(uint64_t program) {
  std::lock_guard<std::mutex> l(impl_->m);
  if (auto it = impl_->programs.find(program); it != impl_->programs.end()) it->second.starting = false;
}

bool ProgramManager::remove(uint64_t program) {
  bool was = false;
  {
    std::lock_guard<std::mutex> l(impl_->m);
    was = impl_->programs.erase(program) > 0;
  }
  std::lock_guard<std::mutex> settled(impl_->checking);  // a check that had it in its table is over
  return was;
}

void ProgramManager::tool_started(uint64_t program) {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    auto it = impl_->programs.find(program);
    if (it == impl_->programs.end()) return;
    if (it->second.tools++ == 0) it->second.tool_since = impl_->now();
  }
  check_now();
}

void ProgramManager::tool_ended(uint64_t program) {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    auto it = impl_->programs.find(program);
    if (it == impl_->programs.end() || it->second.tools == 0) return;
    --it->second.tools;
  }
  check_now();
}

void ProgramManager::abandon_waiting() {
  std::lock_guard<std::mutex> one(impl_->checking);  // none is admitted under us
  std::vector<uint64_t> waiting;
  {
    std::lock_guard<std::mutex> l(impl_->m);
    impl_->closed = true;
    for (auto it = impl_->programs.begin(); it != impl_->programs.end();) {
      if (!it->second.starting) {
        ++it;
        continue;
      }
      waiting.push_back(it->first);
      it = impl_->programs.erase(it);
    }
  }
  caf::scoped_actor self{impl_->sys};
  for (uint64_t id : waiting) {
    ProgramCmd end = command(ProgramCmd::Op::terminate, id);
    end.cancel = true;
    if (auto r = ask(self, impl_->batcher, encode_program(0, end), std::chrono::seconds(30)); !r)
      spdlog::warn("scheduler: ending program {}, which was waiting to start: {}", id, r.error().message);
  }
}

void ProgramManager::check_now() {
  impl_->poke_now();
}

void ProgramManager::check() {
  impl_->check();
}

ProgramManagerStats ProgramManager::stats() const {
  std::lock_guard<std::mutex> l(impl_->m);
  ProgramManagerStats s = impl_->stats;
  s.programs = static_cast<int64_t>(impl_->programs.size());
  return s;
}

}  // namespace chorus
