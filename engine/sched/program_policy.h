// Program-aware scheduling policy (ThunderAgent §4.3), as a plain class: fed with the programs'
// numbers and a clock, it says which programs to pause (and how), which to restore, and whose
// tools to prewarm. No actors, no engine: the live part (actors/) measures, calls decide() every
// check period and at request boundaries, and carries the decisions out.
//
// The rules:
//  - Memory is counted in KV pages, exactly (a program's resident pages, shared blocks once).
//    The *weighted* use counts an acting program's pages times f(t) = 2^(-t/tau), t the time it
//    has been acting: a program whose tool has run long is less likely to need its cache soon.
//  - Restore programs ready to reason (an acting program has nothing to run: restoring it ahead
//    of its next request only makes it the next victim) while the weighted use is below the low
//    watermark, from one queue ordered by S_restore: the smallest aged size c * 2^(-wait/aging)
//    (a large program's key shrinks while it waits, so it cannot starve). In order, while the
//    next fits under the low watermark (weighted); the queue does not skip a program that does
//    not fit (no starvation by smaller ones), except that a program larger than the whole budget
//    is restored when no program is running (pinned): the idle ones resident make way for it. With
//    offload_displaces (off by default: it pays only while host memory holds every displaced program,
//    docs/scheduling.md), acting programs that can be moved out cheaply — offloaded to host memory, where
//    there is room and copying costs less than a re-prefill — do not count against the low watermark: a ready
//    program displaces them (the pause rule below picks them first).
//  - Then, while the resident pages (restored ones included) exceed the high watermark, pause:
//    acting programs before reasoning ones; within each, the smallest weighted size first (a
//    long tool call makes even a large program cheap to keep out). Shortest-first minimises the
//    recompute cost sum(c^2) (the paper's theorem); a last pass drops victims that are not needed
//    to get below the watermark, largest first. Pinned programs (a request in flight) and the
//    ones just restored are never victims. So a ready program can take the place of programs
//    idling in long tool calls, and between the watermarks nothing moves (hysteresis).
//  - Pause mode per program by cost: dropping costs a re-prefill, a*c + b*c^2; offloading costs
//    copying out and back, 2*g*c, and needs room in host memory.
//  - Prewarm the tools of the first `prewarm_depth` programs of the restore queue.
//  - Hybrid models with counted linear-state slots (capacity_slots > 0: on a GPU, a block's
//    Gated DeltaNet state outweighs its KV pages, so slots, not pages, bound the programs): slots
//    are counted beside pages, exactly and with no watermark (a slot is a block): a program
//    comes back only while its slots fit beside those of the resident ones (slots are whole: an
//    acting program's count fully while f(t) >= 1/2 and not at all after, one decay time into
//    its tool call), and programs are paused while the
//    resident ones want more slots than there are, in the same victim order. A paused program
//    holds no slot (dropped: its state is rebuilt at the restore; offloaded: in host memory).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/sched/program_state.h"

namespace chorus {

struct ProgramPolicyOptions {
  int64_t capacity_pages = 1024;  // KV pages the programs share
  double high_watermark = 0.95;   // pause above high * capacity ...
  double low_watermark = 0.85;    // ... restore below low * capacity (low <= high)
  double decay_tau_s = 2.0;       // f(t) = 2^(-t / tau) for acting programs
  double aging_s = 10.0;          // a waiting program's key halves every aging_s seconds
  double check_period_s = 5.0;    // Delta t between periodic checks
  int prewarm_depth = 2;          // tools prepared for this many programs at the head of the queue
  // Cost model, in the same (arbitrary) unit: drop = recompute_linear * c + recompute_quadratic *
  // c^2, offload = 2 * offload_per_page * c (pages out and back), c in pages.
  double recompute_linear = 1.0;
  double recompute_quadratic = 1.0 / 64;
  double offload_per_page = 0.05;
  int64_t host_capacity_pages = 0;  // pages host memory may hold for offloaded programs (0: none)
  bool offload_displaces = false;   // a ready program displaces acting ones that offload cheaply
  int64_t capacity_slots = 0;       // linear-state slots the programs share (0: not counted)
};

// What the policy is told about one program.
struct ProgramSnapshot {
  uint64_t id = 0;
  ProgramPhase phase = ProgramPhase::reasoning;
  double phase_since = 0;  // clock time the phase began
  ProgramState state = ProgramState::active;
  int64_t pages = 0;        // active: resident pages; paused: pages it needs when restored
  int64_t slots = 0;        // linear-state slots, the same way (0 where they are not counted)
  double paused_since = 0;  // paused: when
  bool offloaded = false;   // paused: its pages sit in host memory
  bool tools_warm = false;  // its tool environment is ready
  bool pinned = false;      // active and not to be paused now (a request in flight)
};

struct PolicyDecision {
  std::vector<std::pair<uint64_t, PauseMode>> pause;  // in the order chosen
  std::vector<uint64_t> restore;                      // in queue order
  std::vector<uint64_t> prewarm;                      // queue head whose tools are not warm
  bool empty() const { return pause.empty() && restore.empty() && prewarm.empty(); }
};

class ProgramPolicy {
 public:
  explicit ProgramPolicy(ProgramPolicyOptions opts);

  // What to do now, given every program (terminated ones are ignored).
  PolicyDecision decide(double now, std::span<const ProgramSnapshot> programs) const;

  // Whether a periodic check is due (and notes that one ran when it is).
  bool due(double now);

  double decay(double acting_s) const;                             // f(t)
  double weight(const ProgramSnapshot& p, double now) const;       // f(t) while acting, else 1
  double slot_weight(const ProgramSnapshot& p, double now) const;  // its slots, or 0 once f(t) < 1/2
  // The key victims are chosen by (smaller first), and the restore queue's key (smaller first).
  double pause_key(const ProgramSnapshot& p, double now) const;  // also its weighted size
  double restore_key(const ProgramSnapshot& p, double now) const;
  PauseMode pause_mode(int64_t pages, int64_t host_free_pages) const;

  const ProgramPolicyOptions& options() const { return opts_; }

 private:
  struct Tally {                                       // what decide() counts first
    int64_t resident = 0, host_used = 0, running = 0;  // running: pages of pinned programs
    int64_t resident_slots = 0;
    double weighted = 0, weighted_slots = 0;              // resident programs' weighted sizes
    std::vector<const ProgramSnapshot*> active, waiting;  // waiting: in restore order
  };
  Tally tally(double now, std::span<const ProgramSnapshot> programs) const;
  bool victim_before(const ProgramSnapshot& a, const ProgramSnapshot& b, double now) const;
  bool over(int64_t pages, int64_t slots) const;  // above the high watermark, or the slots
  void choose_restores(double now, Tally& t, PolicyDecision& d) const;
  void choose_pauses(double now, const Tally& t, PolicyDecision& d) const;

  ProgramPolicyOptions opts_;
  double last_check_ = -1e300;
};

// The request-level baselines the benchmark compares with (docs/scheduling.md): a request for a
// paused program (pinned) runs as soon as there is room, made by dropping idle programs least
// recently used first; nothing is restored ahead of a request, nothing is offloaded. LRU: any
// idle program may go; TTL (Continuum-like): one stays pinned for ttl_s after its request.
enum class BaselinePolicy { lru, ttl };
// What a node's scheduler runs (`--policy`): the program policy, or one of the baselines.
enum class SchedulingMode { program, lru, ttl };
// With capacity_slots > 0, linear-state slots are made room for like pages.
PolicyDecision decide_baseline(BaselinePolicy kind, double ttl_s, int64_t capacity_pages, double now,
                               std::span<const ProgramSnapshot> programs, int64_t capacity_slots = 0);

}  // namespace chorus
