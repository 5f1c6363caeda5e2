#include "engine/sched/program_policy.h"

#include <algorithm>
#include <cmath>

namespace chorus {

ProgramPolicy::ProgramPolicy(ProgramPolicyOptions opts) : opts_(opts) {
  opts_.low_watermark = std::min(opts_.low_watermark, opts_.high_watermark);
}

bool ProgramPolicy::due(double now) {
  if (now - last_check_ < opts_.check_period_s) return false;
  last_check_ = now;
  return true;
}

double ProgramPolicy::decay(double acting_s) const {
  return std::exp2(-std::max(0.0, acting_s) / opts_.decay_tau_s);
}

double ProgramPolicy::weight(const ProgramSnapshot& p, double now) const {
  return p.phase == ProgramPhase::acting ? decay(now - p.phase_since) : 1.0;
}

double ProgramPolicy::pause_key(const ProgramSnapshot& p, double now) const {
  return static_cast<double>(p.pages) * weight(p, now);
}

// Slots are whole: an acting program's count fully until its weight falls below one half (one
// decay time into its tool call), and then not at all (a ready program may take their place).
double ProgramPolicy::slot_weight(const ProgramSnapshot& p, double now) const {
  return weight(p, now) >= 0.5 ? static_cast<double>(p.slots) : 0.0;
}

bool ProgramPolicy::over(int64_t pages, int64_t slots) const {
  return static_cast<double>(pages) > opts_.high_watermark * static_cast<double>(opts_.capacity_pages) ||
         (opts_.capacity_slots > 0 && slots > opts_.capacity_slots);
}

double ProgramPolicy::restore_key(const ProgramSnapshot& p, double now) const {
  return static_cast<double>(p.pages) * std::exp2(-std::max(0.0, now - p.paused_since) / opts_.aging_s);
}

PauseMode ProgramPolicy::pause_mode(int64_t pages, int64_t host_free_pages) const {
  const double c = static_cast<double>(pages);
  const double drop = opts_.recompute_linear * c + opts_.recompute_quadratic * c * c;
  const double offload = 2 * opts_.offload_per_page * c;
  return pages <= host_free_pages && offload < drop ? PauseMode::offload : PauseMode::drop;
}

// Victim order: acting before reasoning; within each, the smallest weighted size first.
bool ProgramPolicy::victim_before(const ProgramSnapshot& a, const ProgramSnapshot& b, double now) const {
  const bool aa = a.phase == ProgramPhase::acting, ba = b.phase == ProgramPhase::acting;
  if (aa != ba) return aa;
  const double ka = pause_key(a, now), kb = pause_key(b, now);
  return ka != kb ? ka < kb : a.id < b.id;
}

ProgramPolicy::Tally ProgramPolicy::tally(double now, std::span<const ProgramSnapshot> programs) const {
  Tally t;
  for (const ProgramSnapshot& p : programs) {
    if (p.state == ProgramState::active) {
      t.resident += p.pages;
      t.resident_slots += p.slots;
      if (p.pinned) t.running += p.pages;
      t.weighted += pause_key(p, now);
      t.weighted_slots += slot_weight(p, now);
      t.active.push_back(&p);
    } else if (p.state == ProgramState::paused) {
      if (p.offloaded) t.host_used += p.pages;
      t.waiting.push_back(&p);
    }
  }
  // Restore: one queue, ready to reason first, then the smallest aged size; in order.
  std::stable_sort(
      t.waiting.begin(), t.waiting.end(), [&](const ProgramSnapshot* a, const ProgramSnapshot* b) {
        const bool ar = a->phase == ProgramPhase::reasoning, br = b->phase == ProgramPhase::reasoning;
        if (ar != br) return ar;
        const double ka = restore_key(*a, now), kb = restore_key(*b, now);
        return ka != kb ? ka < kb : a->id < b->id;
      });
  return t;
}

// Under the low watermark, the restore queue's head comes back, in order, while it fits; the
// next ones' tools are made ready.
void ProgramPolicy::choose_restores(double now, Tally& t, PolicyDecision& d) const {
  auto victim_order = [&](const ProgramSnapshot* a, const ProgramSnapshot* b) {
    return victim_before(*a, *b, now);
  };
  // Acting programs that would go to host memory, cheaper than a re-prefill, in victim order:
  // their weight does not hold a ready program back (it displaces them).
  double held = t.weighted, held_slots = t.weighted_slots;
  if (opts_.offload_displaces) {
    std::vector<const ProgramSnapshot*> movable;
    for (const ProgramSnapshot* p : t.active)
      if (p->phase == ProgramPhase::acting && !p->pinned) movable.push_back(p);
    std::stable_sort(movable.begin(), movable.end(), victim_order);
    int64_t room = opts_.host_capacity_pages - t.host_used;
    for (const ProgramSnapshot* p : movable)
      if (pause_mode(p->pages, room) == PauseMode::offload) {
        room -= p->pages;
        held -= pause_key(*p, now);
        held_slots -= slot_weight(*p, now);
      }
  }
  const double low = opts_.low_watermark * static_cast<double>(opts_.capacity_pages);
  const double slots = static_cast<double>(opts_.capacity_slots);
  auto slots_fit = [&](int64_t more) {
    return opts_.capacity_slots == 0 || held_slots + static_cast<double>(more) <= slots;
  };
  size_t next = 0;
  if (held < low && slots_fit(0)) {
    for (; next < t.waiting.size(); ++next) {
      const ProgramSnapshot* p = t.waiting[next];
      // Only a program ready to reason comes back: an acting one has nothing to run, and with its
      // decayed weight it would be the first victim of the next check (a pause/restore ping-pong).
      if (p->phase != ProgramPhase::reasoning) break;
      // A program larger than the budget comes back when nothing is running: the programs
      // resident then are idle (or waiting to start), and the pause step below makes way.
      const bool alone = t.running == 0 && d.restore.empty();
      if ((held + static_cast<double>(p->pages) > low || !slots_fit(p->slots)) && !alone)
        break;  // in order: no skipping
      d.restore.push_back(p->id);
      t.resident += p->pages;
      t.resident_slots += p->slots;
      held += static_cast<double>(p->pages);  // restored to run: weight 1
      held_slots += static_cast<double>(p->slots);
    }
  }
  for (size_t i = next; i < t.waiting.size() && static_cast<int>(i - next) < opts_.prewarm_depth; ++i)
    if (!t.waiting[i]->tools_warm) d.prewarm.push_back(t.waiting[i]->id);
}

// Over the high watermark (or the slots): pause, acting before reasoning, smallest weighted size
// first.
void ProgramPolicy::choose_pauses(double now, const Tally& t, PolicyDecision& d) const {
  if (!over(t.resident, t.resident_slots)) return;
  std::vector<const ProgramSnapshot*> candidates;
  for (const ProgramSnapshot* p : t.active)
    if (!p->pinned) candidates.push_back(p);
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [&](const ProgramSnapshot* a, const ProgramSnapshot* b) { return victim_before(*a, *b, now); });
  std::vector<const ProgramSnapshot*> victims;
  int64_t left = t.resident, left_slots = t.resident_slots;
  for (const ProgramSnapshot* p : candidates) {
    if (!over(left, left_slots)) break;
    victims.push_back(p);
    left -= p->pages;
    left_slots -= p->slots;
  }
  // Victims that are not needed to get below the watermark stay, the largest first (the greedy
  // can overshoot: freeing 1 then 10 pages when 10 alone would do).
  std::vector<const ProgramSnapshot*> by_size = victims;
  std::stable_sort(by_size.begin(), by_size.end(), [](auto* a, auto* b) { return a->pages > b->pages; });
  for (const ProgramSnapshot* p : by_size)
    if (!over(left + p->pages, left_slots + p->slots)) {
      left += p->pages;
      left_slots += p->slots;
      std::erase(victims, p);
    }
  int64_t host_used = t.host_used;
  for (const ProgramSnapshot* p : victims) {
    const PauseMode m = pause_mode(p->pages, opts_.host_capacity_pages - host_used);
    if (m == PauseMode::offload) host_used += p->pages;
    d.pause.emplace_back(p->id, m);
  }
}

PolicyDecision ProgramPolicy::decide(double now, std::span<const ProgramSnapshot> programs) const {
  PolicyDecision d;
  Tally t = tally(now, programs);
  choose_restores(now, t, d);
  choose_pauses(now, t, d);
  return d;
}

PolicyDecision decide_baseline(BaselinePolicy kind, double ttl_s, int64_t cap, double t,
                               std::span<const ProgramSnapshot> programs, int64_t cap_slots) {
  PolicyDecision d;
  int64_t resident = 0, resident_slots = 0;
  auto over = [&](int64_t pages, int64_t slots) {
    return pages > cap || (cap_slots > 0 && slots > cap_slots);
  };
  std::vector<const ProgramSnapshot*> idle, queued, wanted;
  for (const auto& p : programs) {
    if (p.state == ProgramState::active) {
      resident += p.pages;
      resident_slots += p.slots;
      if (p.pinned) continue;
      if (p.phase == ProgramPhase::reasoning)
        queued.push_back(&p);  // a request not started yet
      else if (kind == BaselinePolicy::lru || t - p.phase_since >= ttl_s)
        idle.push_back(&p);
    } else if (p.state == ProgramState::paused && p.phase == ProgramPhase::reasoning) {
      wanted.push_back(&p);  // paused, with a request waiting
    }
  }
  auto older = [](const ProgramSnapshot* a, const ProgramSnapshot* b) {
    return a->phase_since < b->phase_since;
  };
  std::sort(idle.begin(), idle.end(), older);  // LRU
  std::sort(wanted.begin(), wanted.end(), older);
  // When idle programs do not make room for the requests that have not started, the newest of
  // those waits (a request-level engine preempts its newest request).
  std::sort(queued.begin(), queued.end(), [&](auto* a, auto* b) { return older(b, a); });
  std::vector<const ProgramSnapshot*> victims = idle;
  victims.insert(victims.end(), queued.begin(), queued.end());
  size_t next = 0;
  auto make_room = [&](int64_t need, int64_t need_slots, size_t limit) {
    while (over(resident + need, resident_slots + need_slots) && next < limit) {
      d.pause.emplace_back(victims[next]->id, PauseMode::drop);
      resident -= victims[next]->pages;
      resident_slots -= victims[next++]->slots;
    }
  };
  make_room(0, 0, victims.size());  // requests in flight growing, new ones
  for (const ProgramSnapshot* w : wanted) {
    int64_t idle_left = 0, idle_slots = 0;  // what the idle programs not yet dropped hold
    for (size_t i = next; i < idle.size(); ++i) {
      idle_left += idle[i]->pages;
      idle_slots += idle[i]->slots;
    }
    if (over(resident - idle_left + w->pages, resident_slots - idle_slots + w->slots))
      break;                                     // it waits for room; nothing is dropped for nothing
    make_room(w->pages, w->slots, idle.size());  // a waiting request takes the place of idle programs only
    d.restore.push_back(w->id);
    resident += w->pages;
    resident_slots += w->slots;
  }
  return d;
}

}  // namespace chorus
