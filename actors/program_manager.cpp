#include "actors/program_manager.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <map>
#include <mutex>

#include "actors/atoms.h"
#include "actors/submit.h"

namespace chorus {

namespace {

// What the handle tells the scheduler actor.
struct SchedulerMsg {
  enum class Op { add, started, remove, tool_started, tool_ended, abandon, check, poke, stop } op = Op::poke;
  uint64_t program = 0;
  int64_t need_pages = 0;
  ProgramTools tools;
};

}  // namespace
}  // namespace chorus

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::SchedulerMsg)

namespace chorus {
namespace {

struct Managed {
  int tools = 0;           // its tool calls running now
  double tool_since = 0;   // when the first of them started
  double tool_end = -1;    // when the last of them ended
  bool wanting = false;    // it wanted the engine at the last check ...
  double wants_since = 0;  // ... since then
  bool admitted = false;   // resident at least once
  bool paused = true;      // registered paused; then as the memory actor last said
  int64_t need_pages = 0;  // until admitted: what its start takes
  int64_t pages = 0;       // active: at the last check; paused: when it was paused
  int64_t tokens = 0;      // the same, in tokens
  bool offloaded = false;  // paused: its pages are in host memory
  double paused_since = 0;
  int64_t pauses = 0, restores = 0;
  bool starting = true;  // its Program::start has not returned
  ProgramTools env;      // its tool environment (none: no hooks)
  bool warm = true;      // ... made
};

}  // namespace

// What the actor publishes after each message, for the handle's readers.
struct ProgramManager::Shared {
  SchedulerOptions opts;
  std::atomic<uint64_t> next_program{1};
  mutable std::mutex m;
  ProgramManagerStats stats;
  std::vector<ScheduledProgram> programs;
};

namespace {

// The scheduler actor's state: plain members, touched by its thread only.
class Scheduler {
 public:
  Scheduler(caf::blocking_actor* self, caf::actor memory, std::shared_ptr<ProgramManager::Shared> shared)
      : self_(self),
        memory_(std::move(memory)),
        shared_(std::move(shared)),
        opts_(shared_->opts),
        policy_(opts_.policy) {}

  void run() {
    self_->send(memory_, scheduler_atom::value);  // it tells us when a scheduled request waits
    learn_slots();
    const double period = opts_.policy.check_period_s;
    bool running = true, due = false;
    double last = now();
    while (running) {
      // Periodic checks every period; news asks for one once the mailbox is empty (after(0)).
      double wait_s = period > 0 ? std::max(0.0, last + period - now()) : 3600;
      if (due) wait_s = 0;
      auto checked = [&] {
        last = now();
        due = false;
        publish();
      };
      // News that never stops coming does not put a check off past its period.
      auto overdue = [&] {
        if (due && now() - last >= period) {
          check();
          checked();
        }
      };
      self_->receive(
          [&](waiting_atom, uint64_t) {
            due = period > 0;
            overdue();
          },
          [&](SchedulerMsg& m) -> bool {
            using Op = SchedulerMsg::Op;
            const bool r = on(m, running);
            if (m.op == Op::check) {
              checked();
              return r;
            }
            due = due || (period > 0 && m.op != Op::stop && m.op != Op::started);
            publish();
            overdue();
            return r;
          },
          caf::after(std::chrono::microseconds(static_cast<int64_t>(wait_s * 1e6))) >>
              [&] {
                if (period <= 0) return;
                check();
                checked();
              });
    }
  }

 private:
  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

  // Hybrid models: the node counts linear-state slots (a GPU's, or a CPU limit); unless told a
  // number, the scheduler shares what the node has.
  void learn_slots() {
    if (opts_.policy.capacity_slots > 0) return;
    auto hb = ask(self_, memory_, encode_heartbeat(0, "", 0, 0), std::chrono::seconds(30));
    if (!hb || hb->slots_total == 0) return;
    opts_.policy.capacity_slots = hb->slots_total;
    policy_ = ProgramPolicy(opts_.policy);
    std::lock_guard<std::mutex> lock(shared_->m);
    shared_->opts.policy.capacity_slots = hb->slots_total;
  }

  Result<Reply> call(const ProgramCmd& c) {
    return ask(self_, memory_, encode_program(0, c), std::chrono::seconds(30));
  }

  // One message from the handle; its answer (add, remove: whether it was done).
  bool on(SchedulerMsg& m, bool& running) {
    using Op = SchedulerMsg::Op;
    switch (m.op) {
      case Op::add: {
        if (closed_) return false;
        Managed& p = programs_[m.program];
        p.need_pages = m.need_pages;
        p.env = std::move(m.tools);
        p.paused_since = now();
        return true;
      }
      case Op::started:
        if (auto it = programs_.find(m.program); it != programs_.end()) it->second.starting = false;
        return true;
      case Op::remove: return programs_.erase(m.program) > 0;
      case Op::tool_started:
        if (auto it = programs_.find(m.program); it != programs_.end() && it->second.tools++ == 0)
          it->second.tool_since = now();
        return true;
      case Op::tool_ended:
        if (auto it = programs_.find(m.program); it != programs_.end()) {
          if (it->second.tools > 0) --it->second.tools;
          it->second.tool_end = now();
        }
        return true;
      case Op::abandon: abandon(); return true;
      case Op::check: check(); return true;
      case Op::poke: return true;
      case Op::stop: running = false; return true;
    }
    return true;
  }

  // One program as the policy sees it, from its ProgramStatus; a paused one past the tool lease
  // is added to `cool`.
  ProgramSnapshot snapshot_of(uint64_t id, Managed& p, const Reply& st, double t,
                              std::vector<uint64_t>& cool) {
    ProgramSnapshot s;
    s.id = id;
    s.state = st.state == ProgramState::paused ? ProgramState::paused : ProgramState::active;
    p.paused = s.state == ProgramState::paused;
    if (s.state == ProgramState::active) {
      p.pages = st.pages;
      p.tokens = st.tokens;
      p.admitted = true;
    }
    // What it takes: its pages (resident, or to restore) and what its requests may still write
    // or need to start; one never admitted, at least what its start was said to take.
    s.pages = p.admitted ? p.pages + st.wanted_pages
                         : std::max(p.need_pages, static_cast<int64_t>(st.wanted_pages));
    // Linear-state slots (hybrid models where they are counted): those its blocks hold (paused:
    // those its restore takes) and those its requests need.
    s.slots = st.slots + st.wanted_slots;
    // Reasoning while it has a request in the engine or one waiting for its restore; acting
    // otherwise: in a tool call (its pages weigh less the longer the tool runs) or waiting for
    // an event (its pages weigh fully: nothing says how long it will wait).
    const bool wants = st.pending > 0 || st.held > 0;
    if (wants && !p.wanting) p.wants_since = p.tool_end > last_check_ ? p.tool_end : t;  // arrival order
    p.wanting = wants;
    s.phase = wants ? ProgramPhase::reasoning : ProgramPhase::acting;
    s.phase_since = wants ? p.wants_since : p.tools > 0 ? p.tool_since : t;
    s.paused_since = p.paused_since;
    s.offloaded = p.offloaded;
    // Pinned: a request in the engine. One waiting for room is not: when every resident program
    // waits for room, pausing one of them is what makes it.
    s.pinned = st.pending > 0;
    // Paused, waiting for an event, no tool call, past the lease: its sandbox goes.
    if (p.env.cool && p.warm && s.state == ProgramState::paused && !wants && p.tools == 0 &&
        t - p.paused_since >= opts_.tool_lease_s) {
      cool.push_back(id);
      p.warm = false;
    }
    s.tools_warm = p.warm || !p.env.warm;
    return s;
  }

  // Where each program stands, from the memory actor (its phase told on the way): the
  // questions go out together and are answered between two steps, not one per step.
  std::vector<ProgramSnapshot> snapshots(double t, std::vector<uint64_t>& cool, int64_t& resident) {
    using Handle = decltype(self_->request(memory_, std::chrono::seconds(30), frame_atom::value, Frame{}));
    std::vector<std::pair<uint64_t, Handle>> asked;
    for (auto& [id, p] : programs_) {
      ProgramCmd phase = ProgramCmd::of(ProgramCmd::Op::phase, id);
      phase.acting = p.tools > 0;
      asked.emplace_back(
          id, self_->request(memory_, std::chrono::seconds(30), frame_atom::value, encode_program(0, phase)));
    }
    std::vector<ProgramSnapshot> snaps;
    for (auto& [id, handle] : asked) {
      Result<Reply> st = make_error(Errc::internal, "no reply from the memory actor");
      std::move(handle).receive([&](const std::vector<uint8_t>& r) { st = decode_reply(r); },
                                [&](caf::error& e) { st = make_error(Errc::internal, caf::to_string(e)); });
      if (!st || st->kind != ReplyKind::program_status) continue;  // ending: terminated under us
      snaps.push_back(snapshot_of(id, programs_[id], *st, t, cool));
      if (snaps.back().state == ProgramState::active) resident += st->pages;
    }
    return snaps;
  }

  PolicyDecision decide(double t, const std::vector<ProgramSnapshot>& snaps) const {
    if (opts_.mode == SchedulingMode::program) return policy_.decide(t, snaps);
    return decide_baseline(opts_.mode == SchedulingMode::ttl ? BaselinePolicy::ttl : BaselinePolicy::lru,
                           opts_.ttl_s, opts_.policy.capacity_pages, t, snaps, opts_.policy.capacity_slots);
  }

  // Tool environments made again: near the head of the queue and asking for the engine (not
  // one that waits for an event), or at the restore at the latest (before the restore: the
  // program's next call may come at once). (program, ahead of its restore)
  std::vector<std::pair<uint64_t, bool>> to_warm(const PolicyDecision& d,
                                                 const std::vector<ProgramSnapshot>& snaps) {
    std::vector<std::pair<uint64_t, bool>> warm;
    for (uint64_t id : d.prewarm)
      if (std::any_of(snaps.begin(), snaps.end(), [&](const ProgramSnapshot& x) {
            return x.id == id && x.phase == ProgramPhase::reasoning;
          }))
        warm.emplace_back(id, true);
    for (uint64_t id : d.restore)
      if (!programs_[id].warm &&
          programs_[id].env.warm)  // the policy prewarms only programs it does not restore
        warm.emplace_back(id, false);
    return warm;
  }

  // Pauses first, then restores (which need the room the pauses made); the outcome into the
  // table and the statistics.
  void carry_out(double t, const PolicyDecision& d) {
    for (const auto& [id, mode] : d.pause) {
      auto r = call(ProgramCmd::of(ProgramCmd::Op::pause, id, mode));
      if (!r) spdlog::debug("scheduler: pausing program {}: {}", id, r.error().message);
      Managed& p = programs_[id];
      if (!r) {
        ++stats_.refused;
        continue;
      }
      ++stats_.pauses;
      ++p.pauses;
      if (mode == PauseMode::offload) ++stats_.offloaded_pauses;
      p.paused = true;
      p.offloaded = mode == PauseMode::offload;
      p.paused_since = t;
      stats_.resident_pages -= p.pages;
    }
    for (uint64_t id : d.restore) {
      auto r = call(ProgramCmd::of(ProgramCmd::Op::restore, id));
      if (!r) spdlog::debug("scheduler: restoring program {}: {}", id, r.error().message);
      Managed& p = programs_[id];
      if (!r) {
        ++stats_.refused;
        continue;
      }
      if (p.admitted) ++p.restores;
      ++(p.admitted ? stats_.restores : stats_.admitted);
      if (p.admitted && !p.offloaded) stats_.recomputed_tokens += p.tokens;
      p.admitted = true;
      p.paused = false;
      p.pages = r->pages;
      p.offloaded = false;
      stats_.resident_pages += p.pages;
    }
  }

  void check() {
    const double t = now();
    std::vector<uint64_t> cool;  // tool environments to remove now
    int64_t resident = 0;
    const std::vector<ProgramSnapshot> snaps = snapshots(t, cool, resident);
    last_check_ = t;
    const PolicyDecision d = decide(t, snaps);
    const std::vector<std::pair<uint64_t, bool>> warm = to_warm(d, snaps);
    for (uint64_t id : cool) programs_[id].env.cool();
    for (const auto& [id, ahead] : warm) {
      programs_[id].env.warm();
      programs_[id].warm = true;
      ++(ahead ? stats_.tools_prewarmed : stats_.tools_warmed_late);
    }
    ++stats_.checks;
    stats_.tools_cooled += static_cast<int64_t>(cool.size());
    stats_.peak_resident_pages = std::max(stats_.peak_resident_pages, resident);
    stats_.resident_pages = resident;
    carry_out(t, d);
  }

  // The programs whose start is not over end; none is added after.
  void abandon() {
    closed_ = true;
    std::vector<uint64_t> waiting;
    for (auto it = programs_.begin(); it != programs_.end();) {
      if (!it->second.starting) {
        ++it;
        continue;
      }
      waiting.push_back(it->first);
      it = programs_.erase(it);
    }
    for (uint64_t id : waiting) {
      ProgramCmd end = ProgramCmd::of(ProgramCmd::Op::terminate, id);
      end.cancel = true;
      if (auto r = call(end); !r)
        spdlog::warn("scheduler: ending program {}, which was waiting to start: {}", id, r.error().message);
    }
  }

  void publish() {
    std::vector<ScheduledProgram> list;
    list.reserve(programs_.size());
    for (const auto& [id, p] : programs_)
      list.push_back(
          {id, p.admitted, p.paused, p.paused && p.offloaded, p.pages, p.tokens, p.pauses, p.restores});
    std::lock_guard<std::mutex> l(shared_->m);
    shared_->stats = stats_;
    shared_->stats.programs = static_cast<int64_t>(programs_.size());
    shared_->programs = std::move(list);
  }

  caf::blocking_actor* self_;
  caf::actor memory_;
  std::shared_ptr<ProgramManager::Shared> shared_;
  SchedulerOptions opts_;
  ProgramPolicy policy_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::map<uint64_t, Managed> programs_;
  ProgramManagerStats stats_;
  double last_check_ = -1;
  bool closed_ = false;  // abandon() ran
};

SchedulerMsg message(SchedulerMsg::Op op, uint64_t program = 0) {
  SchedulerMsg m;
  m.op = op;
  m.program = program;
  return m;
}

// Sends `m` and waits for the scheduler's answer.
bool ask_scheduler(caf::actor_system& sys, const caf::actor& scheduler, SchedulerMsg m) {
  caf::scoped_actor self{sys};
  bool out = false;
  self->request(scheduler, caf::infinite, std::move(m))
      .receive([&](bool r) { out = r; }, [&](caf::error&) { out = false; });
  return out;
}

}  // namespace

ProgramManager::ProgramManager(caf::actor_system& sys, caf::actor memory, SchedulerOptions opts)
    : shared_(std::make_shared<Shared>()) {
  shared_->opts = opts;
  shared_->next_program = opts.first_program_id;
  actor_ = sys.spawn([memory = std::move(memory), shared = shared_](caf::blocking_actor* self) {
    Scheduler(self, memory, shared).run();
  });
}

ProgramManager::ProgramManager(caf::actor_system& sys, caf::actor memory, ProgramPolicyOptions opts,
                               double tool_lease_s)
    : ProgramManager(
          sys, std::move(memory),
          SchedulerOptions{.policy = opts, .mode = SchedulingMode::program, .tool_lease_s = tool_lease_s}) {}

ProgramManager::~ProgramManager() {
  ask_scheduler(actor_.home_system(), actor_, message(SchedulerMsg::Op::stop));
}

bool ProgramManager::add(uint64_t program, int64_t need_pages, ProgramTools tools) {
  return ask_scheduler(actor_.home_system(), actor_,
                       SchedulerMsg{SchedulerMsg::Op::add, program, need_pages, std::move(tools)});
}

void ProgramManager::started(uint64_t program) {
  caf::anon_send(actor_, message(SchedulerMsg::Op::started, program));
}

bool ProgramManager::remove(uint64_t program) {
  return ask_scheduler(actor_.home_system(), actor_, message(SchedulerMsg::Op::remove, program));
}

void ProgramManager::tool_started(uint64_t program) {
  caf::anon_send(actor_, message(SchedulerMsg::Op::tool_started, program));
}

void ProgramManager::tool_ended(uint64_t program) {
  caf::anon_send(actor_, message(SchedulerMsg::Op::tool_ended, program));
}

void ProgramManager::abandon_waiting() {
  ask_scheduler(actor_.home_system(), actor_, message(SchedulerMsg::Op::abandon));
}

void ProgramManager::check_now() {
  caf::anon_send(actor_, message(SchedulerMsg::Op::poke));
}

void ProgramManager::check() {
  ask_scheduler(actor_.home_system(), actor_, message(SchedulerMsg::Op::check));
}

uint64_t ProgramManager::new_program_id() {
  return shared_->next_program++;
}

ProgramManagerStats ProgramManager::stats() const {
  std::lock_guard<std::mutex> l(shared_->m);
  return shared_->stats;
}

std::vector<ScheduledProgram> ProgramManager::programs() const {
  std::lock_guard<std::mutex> l(shared_->m);
  return shared_->programs;
}

const SchedulerOptions& ProgramManager::options() const {
  return shared_->opts;
}

}  // namespace chorus
