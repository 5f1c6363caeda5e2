#include "engine/sched/cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace chorus {

const char* sim_routing_name(SimRouting r) {
  return r == SimRouting::sticky ? "sticky" : "global";
}

namespace {

struct ClusterProg {
  uint64_t id = 0;
  int home = 0;   // the node it was placed on
  int node = -1;  // where its KV is (resident), or was last (-1: never resident)
  bool reasoning = true;
  bool resident = false;
  int64_t ctx = 0, cached = 0, lost = 0;
  int remaining = 0, step = 0, steps = 0;
  int64_t tool_tokens = 0;
  bool in_step = false;
  double phase_since = 0, act_end = 0, reason_start = 0, paused_since = 0;
  int64_t pending() const { return ctx - cached; }
};

struct Node {
  double clock = 0;
  int64_t used = 0;
};

class ClusterSim {
 public:
  explicit ClusterSim(const ClusterSimOptions& o)
      : o_(o),
        s_(o_.node),
        rng_(o_.node.seed),
        policy_(policy_opts(o_.node)),
        nodes_(static_cast<size_t>(o_.nodes)) {
    for (int i = 0; i < o.nodes * s_.concurrency; ++i) spawn(0);
  }

  ClusterSimResult run() {
    int64_t sampled = 0;
    double imbalance_sum = 0;
    while (true) {
      const size_t ni = next_node();
      Node& n = nodes_[ni];
      const double t = n.clock;
      if (t >= s_.duration_s) break;
      tools_done(t);
      apply_policy(ni, t);  // before each of its steps: the other nodes may have paused programs meanwhile
      int64_t tokens = 0;
      double pairs = 0;
      const auto work = plan_step(ni, tokens, pairs);
      if (work.empty()) {
        n.clock = idle_until(ni, t);
        continue;
      }
      const double dt =
          s_.step_fixed_s + s_.step_per_token_s * static_cast<double>(tokens) + s_.step_per_pair_s * pairs;
      n.clock = t + dt;
      apply_step(work, n.clock);
      const double im = imbalance();
      r_.peak_imbalance = std::max(r_.peak_imbalance, im);
      imbalance_sum += im;
      ++sampled;
    }
    r_.steps_per_min = 60.0 * static_cast<double>(r_.steps_done) / s_.duration_s;
    r_.mean_imbalance = sampled > 0 ? imbalance_sum / static_cast<double>(sampled) : 0;
    std::sort(latencies_.begin(), latencies_.end());
    if (!latencies_.empty())
      r_.p99_reason_s = latencies_[std::min(latencies_.size() - 1, latencies_.size() * 99 / 100)];
    return r_;
  }

 private:
  static ProgramPolicyOptions policy_opts(const SimOptions& s) {
    ProgramPolicyOptions p = s.program;
    p.capacity_pages = s.capacity_pages;
    p.host_capacity_pages = 0;  // every pause drops: a host copy would tie the program to its node
    return p;
  }

  size_t next_node() const {
    size_t best = 0;
    for (size_t i = 1; i < nodes_.size(); ++i)
      if (nodes_[i].clock < nodes_[best].clock) best = i;
    return best;
  }

  // A node with nothing to run waits for the next tool to end or the next step of another node
  // (which may pause a program it could take), whichever comes first.
  double idle_until(size_t ni, double t) const {
    double next = std::numeric_limits<double>::infinity();
    for (const ClusterProg& p : progs_)
      if (!p.reasoning && p.act_end > t) next = std::min(next, p.act_end);
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (i != ni && nodes_[i].clock > t) next = std::min(next, nodes_[i].clock);
    return std::isfinite(next) && next > t ? next : std::isfinite(next) ? t + s_.step_fixed_s : s_.duration_s;
  }

  bool tools_done(double t) {
    bool any = false;
    for (ClusterProg& p : progs_)
      if (!p.reasoning && p.act_end <= t) {
        p.reasoning = true;
        p.reason_start = p.phase_since = t;
        p.ctx += p.tool_tokens;
        p.remaining = s_.reason_tokens;
        any = true;
      }
    return any;
  }

  std::vector<std::pair<ClusterProg*, int64_t>> plan_step(size_t ni, int64_t& tokens, double& pairs) {
    Node& n = nodes_[ni];
    int64_t budget = s_.token_budget;
    std::vector<std::pair<ClusterProg*, int64_t>> work;
    for (int pass = 0; pass < 2; ++pass)
      for (ClusterProg& p : progs_) {
        if (!p.resident || p.node != static_cast<int>(ni) || !p.reasoning || budget == 0) continue;
        const bool decode = p.pending() == 0;
        if ((pass == 0) != decode) continue;
        const int64_t k = decode ? 1 : std::min(p.pending(), budget);
        const int64_t need = pages_for_tokens(p.cached + k) - pages_for_tokens(p.cached);
        if (need > s_.capacity_pages - n.used) continue;  // the policy reserved room when it restored
        n.used += need;
        work.emplace_back(&p, k);
        budget -= k;
        tokens += k;
        pairs += static_cast<double>(k) * (static_cast<double>(p.cached) + static_cast<double>(k) / 2);
      }
    return work;
  }

  bool apply_step(const std::vector<std::pair<ClusterProg*, int64_t>>& work, double t) {
    bool boundary = false;
    for (auto& [p, k] : work) {
      const bool decode = p->pending() == 0;
      p->cached += k;
      if (!decode) continue;
      ++p->ctx;
      if (--p->remaining > 0) continue;
      latencies_.push_back(t - p->reason_start);
      ++r_.steps_done;
      boundary = true;
      if (++p->step >= p->steps || p->ctx + p->tool_tokens + s_.reason_tokens > max_ctx_) {
        nodes_[static_cast<size_t>(p->node)].used -= pages_for_tokens(p->cached);
        p->id = 0;  // replaced below
      } else {
        p->reasoning = false;
        p->phase_since = t;
        p->act_end = t + std::min(s_.tool_cap_s, s_.tool_scale_s * pareto());
      }
    }
    const size_t before = progs_.size();
    std::erase_if(progs_, [](const ClusterProg& p) { return p.id == 0; });
    for (size_t i = progs_.size(); i < before; ++i) spawn(t);
    return boundary;
  }

  double imbalance() const {
    int64_t most = 0, least = std::numeric_limits<int64_t>::max();
    for (const Node& n : nodes_) {
      most = std::max(most, n.used);
      least = std::min(least, n.used);
    }
    return static_cast<double>(most - least) / static_cast<double>(s_.capacity_pages);
  }

  double pareto() {
    std::uniform_real_distribution<double> u(1e-12, 1.0);
    return std::pow(u(rng_), -1.0 / s_.tool_alpha);
  }

  // A new program, placed on the node with the most free pages less what its waiting programs
  // want (fewer programs there breaking ties), as the coordinator places one.
  void spawn(double t) {
    std::vector<int64_t> room(nodes_.size()), count(nodes_.size(), 0);
    for (size_t i = 0; i < nodes_.size(); ++i) room[i] = s_.capacity_pages - nodes_[i].used;
    for (const ClusterProg& q : progs_) {
      ++count[static_cast<size_t>(q.home)];
      if (!q.resident) room[static_cast<size_t>(q.home)] -= pages_for_tokens(q.ctx);
    }
    size_t best = 0;
    for (size_t i = 1; i < nodes_.size(); ++i)
      if (room[i] > room[best] || (room[i] == room[best] && count[i] < count[best])) best = i;
    ClusterProg p;
    p.id = next_id_++;
    p.home = static_cast<int>(best);
    p.ctx = s_.prompt_tokens;
    p.remaining = s_.reason_tokens;
    std::uniform_int_distribution<int> steps(1, std::max(1, 2 * s_.steps - 1));
    p.steps = steps(rng_);
    std::uniform_real_distribution<double> spread(-o_.tool_tokens_spread, o_.tool_tokens_spread);
    p.tool_tokens = std::llround(static_cast<double>(s_.tool_tokens) * std::exp2(spread(rng_)));
    p.reason_start = p.phase_since = p.paused_since = t;
    progs_.push_back(p);
  }

  // Node ni's policy over its resident programs and the paused ones it may take: its own
  // (sticky), or every paused program of the cluster (global).
  void apply_policy(size_t ni, double t) {
    const int here = static_cast<int>(ni);
    std::vector<ProgramSnapshot> snaps;
    for (const ClusterProg& p : progs_) {
      const bool mine = p.resident ? p.node == here : o_.routing == SimRouting::global || p.home == here;
      if (!mine) continue;
      ProgramSnapshot s;
      s.id = p.id;
      s.phase = p.reasoning ? ProgramPhase::reasoning : ProgramPhase::acting;
      s.phase_since = p.phase_since;
      s.state = p.resident ? ProgramState::active : ProgramState::paused;
      s.paused_since = p.paused_since;
      s.pages = p.reasoning  ? pages_for_tokens(p.ctx + p.remaining)
                : p.resident ? pages_for_tokens(p.cached)
                             : pages_for_tokens(p.ctx);
      s.pinned = p.resident && p.reasoning;
      s.tools_warm = true;
      snaps.push_back(s);
    }
    const PolicyDecision d = policy_.decide(t, snaps);
    for (const auto& [id, mode] : d.pause)
      if (ClusterProg* p = find(id)) evict(*p, t);
    for (uint64_t id : d.restore) {
      ClusterProg* p = find(id);
      if (!p) continue;
      // The global queue balances: a node takes a program only while no other has more room
      // (with sticky routing a program has one node only).
      if (o_.routing == SimRouting::global && room(ni) < most_room_elsewhere(ni)) break;
      admit(*p, here);
    }
  }

  // A node's pages less what its resident programs will want: a reasoning one its context and
  // the tokens it will generate, an acting one what it holds.
  int64_t room(size_t ni) const {
    int64_t want = 0;
    for (const ClusterProg& p : progs_)
      if (p.resident && p.node == static_cast<int>(ni))
        want += p.reasoning ? pages_for_tokens(p.ctx + p.remaining) : pages_for_tokens(p.cached);
    return s_.capacity_pages - std::max(want, nodes_[ni].used);
  }
  int64_t most_room_elsewhere(size_t ni) const {
    int64_t most = std::numeric_limits<int64_t>::min();
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (i != ni) most = std::max(most, room(i));
    return most;
  }

  ClusterProg* find(uint64_t id) {
    for (ClusterProg& p : progs_)
      if (p.id == id) return &p;
    return nullptr;
  }

  void evict(ClusterProg& p, double t) {
    nodes_[static_cast<size_t>(p.node)].used -= pages_for_tokens(p.cached);
    p.lost += p.cached;
    p.cached = 0;
    p.resident = false;
    p.paused_since = t;
    ++r_.evictions;
  }

  void admit(ClusterProg& p, int node) {
    if (p.node >= 0 && p.node != node) ++r_.migrations;
    p.node = node;
    p.resident = true;
    r_.recomputed_tokens += p.lost;  // its dropped context is prefilled again, here
    p.lost = 0;
  }

  const ClusterSimOptions o_;
  const SimOptions& s_;
  std::mt19937_64 rng_;
  ProgramPolicy policy_;
  std::vector<Node> nodes_;
  const int64_t max_ctx_ = o_.max_context_tokens > 0 ? o_.max_context_tokens : s_.capacity_pages * 16 / 4;
  std::vector<ClusterProg> progs_;
  uint64_t next_id_ = 1;
  std::vector<double> latencies_;
  ClusterSimResult r_;
};

}  // namespace

ClusterSimResult simulate_cluster(const ClusterSimOptions& opts) {
  return ClusterSim(opts).run();
}

}  // namespace chorus
