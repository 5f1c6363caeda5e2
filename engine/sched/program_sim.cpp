#include "engine/sched/program_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace chorus {

const char* sim_policy_name(SimPolicy p) {
  switch (p) {
    case SimPolicy::program: return "program";
    case SimPolicy::lru: return "lru";
    case SimPolicy::ttl: return "ttl";
  }
  return "?";
}

namespace {

struct Prog {
  uint64_t id = 0;
  bool reasoning = true;
  bool resident = false;
  int64_t ctx = 0;     // tokens in its context
  int64_t cached = 0;  // of which have KV (resident only)
  int64_t lost = 0;    // tokens whose KV an eviction dropped (recomputed when it runs again)
  int64_t off = 0;     // tokens whose KV sits in host memory (copied back when it runs again)
  int remaining = 0;   // decode tokens left in this reason phase
  int step = 0;
  bool in_step = false;  // has work in the engine step being built
  double phase_since = 0, act_end = 0, reason_start = 0, paused_since = 0, admitted = 0;
  int64_t pending() const { return ctx - cached; }
};

class Sim {
 public:
  explicit Sim(const SimOptions& o) : o_(o), rng_(o.seed), policy_(policy_opts(o)) {
    for (int i = 0; i < o.concurrency; ++i) spawn(0);
  }

  SimResult run() {
    double t = 0, last_check = -1e9;
    bool boundary = true;
    int stuck = 0;
    while (t < o_.duration_s) {
      boundary |= tools_done(t);
      if (o_.policy == SimPolicy::program) {
        if (boundary || t - last_check >= o_.program.check_period_s) {
          apply_policy(t);
          last_check = t;
        }
      } else {
        admit_baseline(t);
      }
      boundary = false;
      int64_t tokens = 0;
      double pairs = 0;
      const std::vector<std::pair<Prog*, int64_t>> work = plan_step(t, tokens, pairs);
      if (work.empty()) {  // nothing can run: jump to the next tool that ends (or the next check)
        double next = std::numeric_limits<double>::infinity();
        for (const Prog& p : progs_)
          if (!p.reasoning) next = std::min(next, p.act_end);
        if (o_.policy == SimPolicy::program) next = std::min(next, last_check + o_.program.check_period_s);
        if (!std::isfinite(next) || next <= t) {
          if (++stuck > 1000 || !unstick(t)) break;  // a program larger than the pool: give up
          continue;
        }
        t = next;
        continue;
      }
      stuck = 0;
      const double dt = o_.step_fixed_s + o_.step_per_token_s * static_cast<double>(tokens) +
                        o_.step_per_pair_s * pairs + copy_s_;
      copy_s_ = 0;  // the copies of the pauses and restores since the last step hold this one up
      t += dt;
      r_.busy_s += dt;
      ++r_.engine_steps;
      boundary |= apply_step(work, t);
    }
    return results();
  }

 private:
  // Programs whose tool is done reason again, with the tool's output added. True if any.
  bool tools_done(double t) {
    bool any = false;
    for (Prog& p : progs_)
      if (!p.reasoning && p.act_end <= t) {
        p.reasoning = true;
        p.reason_start = p.phase_since = t;
        r_.context_tokens += p.ctx;
        p.ctx += o_.tool_tokens;
        p.remaining = o_.reason_tokens;
        any = true;
      }
    return any;
  }

  // One engine step: decode first, then prefill chunks, within the token budget.
  std::vector<std::pair<Prog*, int64_t>> plan_step(double t, int64_t& tokens, double& pairs) {
    int64_t budget = o_.token_budget;
    std::vector<std::pair<Prog*, int64_t>> work;
    for (Prog& p : progs_) p.in_step = false;
    for (int pass = 0; pass < 2; ++pass)
      for (Prog& p : progs_) {
        if (!p.resident || !p.reasoning || budget == 0) continue;
        const bool decode = p.pending() == 0;
        if ((pass == 0) != decode) continue;
        const int64_t n = decode ? 1 : std::min(p.pending(), budget);
        if (!room_for(p, n, t)) continue;
        used_ += pages_for_tokens(p.cached + n) - pages_for_tokens(p.cached);
        p.in_step = true;
        work.emplace_back(&p, n);
        budget -= n;
        tokens += n;
        pairs += static_cast<double>(n) * (static_cast<double>(p.cached) + static_cast<double>(n) / 2);
      }
    return work;
  }

  // The step's tokens go in; a reason phase that ends is a step done (act next, or end: a new
  // program comes). True when one ended.
  bool apply_step(const std::vector<std::pair<Prog*, int64_t>>& work, double t) {
    bool boundary = false;
    for (auto& [p, n] : work) {
      const bool decode = p->pending() == 0;
      p->cached += n;
      if (!decode) continue;
      ++p->ctx;
      if (--p->remaining > 0) continue;
      latencies_.push_back(t - p->reason_start);
      ++r_.steps_done;
      boundary = true;
      if (++p->step >= o_.steps) {
        used_ -= pages_for_tokens(p->cached);
        *p = Prog{};
        p->id = 0;  // replaced below
      } else {
        p->reasoning = false;
        p->phase_since = t;
        p->act_end = t + std::min(o_.tool_cap_s, o_.tool_scale_s * pareto());
      }
    }
    for (size_t i = 0; i < progs_.size(); ++i)
      if (progs_[i].id == 0) {
        progs_.erase(progs_.begin() + static_cast<std::ptrdiff_t>(i));
        spawn(t);
        --i;
      }
    return boundary;
  }

  SimResult results() {
    r_.steps_per_min = 60.0 * static_cast<double>(r_.steps_done) / o_.duration_s;
    r_.hit_rate = r_.context_tokens > 0 ? 1.0 - static_cast<double>(r_.recomputed_tokens) /
                                                    static_cast<double>(r_.context_tokens)
                                        : 1.0;
    std::sort(latencies_.begin(), latencies_.end());
    if (!latencies_.empty()) {
      r_.p50_reason_s = latencies_[latencies_.size() / 2];
      r_.p99_reason_s = latencies_[std::min(latencies_.size() - 1, latencies_.size() * 99 / 100)];
    }
    return r_;
  }

  static ProgramPolicyOptions policy_opts(const SimOptions& o) {
    ProgramPolicyOptions p = o.program;
    p.capacity_pages = o.capacity_pages;
    return p;
  }

  double pareto() {
    std::uniform_real_distribution<double> u(1e-12, 1.0);
    return std::pow(u(rng_), -1.0 / o_.tool_alpha);
  }

  void spawn(double t) {
    Prog p;
    p.id = next_id_++;
    p.reasoning = true;
    p.ctx = o_.prompt_tokens;
    p.remaining = o_.reason_tokens;
    p.reason_start = p.phase_since = p.paused_since = t;
    progs_.push_back(p);
  }

  void evict(Prog& p, double t, PauseMode mode = PauseMode::drop) {
    const int64_t pages = pages_for_tokens(p.cached);
    used_ -= pages;
    if (mode == PauseMode::offload) {
      p.off = p.cached;
      copy_s_ += o_.offload_page_s * static_cast<double>(pages);
      ++r_.offloads;
    } else {
      p.lost += p.cached;
      ++r_.evictions;
    }
    p.cached = 0;
    p.resident = false;
    p.paused_since = t;
  }

  void admit(Prog& p, double t) {
    p.resident = true;
    p.admitted = t;
    r_.recomputed_tokens += p.lost;  // its dropped context is prefilled again
    p.lost = 0;
    if (p.off > 0) {  // its offloaded context is copied back
      const int64_t pages = pages_for_tokens(p.off);
      used_ += pages;
      copy_s_ += o_.offload_page_s * static_cast<double>(pages);
      p.cached = p.off;
      p.off = 0;
    }
  }

  int64_t free_pages() const { return o_.capacity_pages - used_; }

  // Room for `n` more tokens of `p`; the baselines evict idle programs (LRU; TTL: only past their
  // pin) and then preempt the most recently admitted reasoning program. The program policy
  // reserved room when it restored; it stalls otherwise.
  bool room_for(Prog& p, int64_t n, double t) {
    const int64_t need = pages_for_tokens(p.cached + n) - pages_for_tokens(p.cached);
    if (need <= free_pages()) return true;
    if (o_.policy == SimPolicy::program) return false;
    while (need > free_pages()) {
      Prog* victim = lru_idle(t);
      if (!victim) {
        for (Prog& q : progs_)
          if (&q != &p && q.resident && q.reasoning && !q.in_step &&
              (!victim || q.admitted > victim->admitted))
            victim = &q;
      }
      if (!victim) return false;
      evict(*victim, t);
    }
    return true;
  }

  Prog* lru_idle(double t) {
    Prog* best = nullptr;
    for (Prog& q : progs_) {
      if (!q.resident || q.reasoning) continue;
      if (o_.policy == SimPolicy::ttl && t - q.phase_since < o_.ttl_s) continue;
      if (!best || q.phase_since < best->phase_since) best = &q;
    }
    return best;
  }

  // Baselines: a reasoning program without its KV is admitted when its context fits, evicting
  // idle programs LRU-first; first come, first served.
  void admit_baseline(double t) {
    std::vector<Prog*> waiting;
    for (Prog& p : progs_)
      if (p.reasoning && !p.resident) waiting.push_back(&p);
    std::sort(waiting.begin(), waiting.end(),
              [](Prog* a, Prog* b) { return a->reason_start < b->reason_start; });
    for (Prog* p : waiting) {
      const int64_t need = pages_for_tokens(p->ctx);
      while (need > free_pages()) {
        Prog* victim = lru_idle(t);
        if (!victim) break;
        evict(*victim, t);
      }
      if (need > free_pages()) break;
      admit(*p, t);
    }
  }

  void apply_policy(double t) {
    std::vector<ProgramSnapshot> snaps;
    for (const Prog& p : progs_) {
      ProgramSnapshot s;
      s.id = p.id;
      s.phase = p.reasoning ? ProgramPhase::reasoning : ProgramPhase::acting;
      s.phase_since = p.phase_since;
      s.state = p.resident ? ProgramState::active : ProgramState::paused;
      s.paused_since = p.paused_since;
      // A reasoning program's room: its whole context and the tokens it will generate.
      s.pages = p.reasoning  ? pages_for_tokens(p.ctx + p.remaining)
                : p.resident ? pages_for_tokens(p.cached)
                             : pages_for_tokens(p.ctx);
      s.pinned = p.resident && p.reasoning;
      s.offloaded = p.off > 0;
      s.tools_warm = true;
      snaps.push_back(s);
    }
    const PolicyDecision d = policy_.decide(t, snaps);
    for (const auto& [id, mode] : d.pause)
      for (Prog& p : progs_)
        if (p.id == id) evict(p, t, mode);
    for (uint64_t id : d.restore)
      for (Prog& p : progs_)
        if (p.id == id) admit(p, t);
  }

  // Nothing runs and nothing will: make room for the longest-waiting reasoning program.
  bool unstick(double t) {
    Prog* w = nullptr;
    for (Prog& p : progs_)
      if (p.reasoning && (!w || (!p.resident && (w->resident || p.reason_start < w->reason_start)))) w = &p;
    if (!w) return false;
    for (Prog& q : progs_)
      if (&q != w && q.resident && free_pages() < pages_for_tokens(w->ctx + w->remaining)) evict(q, t);
    if (!w->resident) admit(*w, t);
    return free_pages() > 0;
  }

  SimOptions o_;
  std::mt19937_64 rng_;
  ProgramPolicy policy_;
  std::vector<Prog> progs_;
  uint64_t next_id_ = 1;
  int64_t used_ = 0;
  double copy_s_ = 0;  // engine time owed to offload copies
  std::vector<double> latencies_;
  SimResult r_;
};

}  // namespace

SimResult simulate(const SimOptions& opts) {
  return Sim(opts).run();
}

}  // namespace chorus
