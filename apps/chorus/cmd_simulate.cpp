// `chorus simulate`: the discrete-event simulator of engine/sched/program_sim.h — programs sharing KV
// pages under the program-aware policy and the request-level baselines — over a sweep of
// concurrency. A model, not a measurement: it shows where a policy collapses, in seconds.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/chorus/commands.h"
#include "engine/sched/cluster_sim.h"
#include "engine/sched/program_sim.h"

namespace chorus::app {
namespace {

SimOptions sim_options(const SimulateArgs& args, SimPolicy p, int concurrency) {
  SimOptions o;
  o.policy = p;
  o.concurrency = concurrency;
  o.steps = args.steps;
  o.capacity_pages = args.pages;
  o.duration_s = args.duration_s;
  o.tool_scale_s = args.tool_scale_s;
  o.seed = args.seed;
  o.program.host_capacity_pages = args.host_pages;
  o.program.offload_displaces = args.displace;
  o.program.aging_s = args.aging_s;
  return o;
}

// --nodes: sticky routing against the global waiting queue, per cluster size and concurrency
// (programs per node).
int run_cluster_simulate(const SimulateArgs& args) {
  nlohmann::json out = nlohmann::json::array();
  std::printf("%5s %11s | %-6s steps/min recomp  imbal | %-6s steps/min recomp  imbal moves | ratio\n",
              "nodes", "concurrency", "sticky", "global");
  for (int nodes : args.nodes)
    for (int n : args.concurrency) {
      ClusterSimResult r[2];
      for (SimRouting routing : {SimRouting::sticky, SimRouting::global}) {
        ClusterSimOptions o;
        o.node = sim_options(args, SimPolicy::program, n);
        o.nodes = nodes;
        o.routing = routing;
        o.tool_tokens_spread = args.tool_spread;
        const ClusterSimResult& x = r[static_cast<int>(routing)] = simulate_cluster(o);
        out.push_back({{"routing", sim_routing_name(routing)},
                       {"nodes", nodes},
                       {"concurrency", n},
                       {"steps_per_min", x.steps_per_min},
                       {"recomputed_tokens", x.recomputed_tokens},
                       {"migrations", x.migrations},
                       {"evictions", x.evictions},
                       {"peak_imbalance", x.peak_imbalance},
                       {"mean_imbalance", x.mean_imbalance},
                       {"p99_reason_s", x.p99_reason_s}});
      }
      const ClusterSimResult &st = r[0], &gl = r[1];
      std::printf("%5d %11d | %6s %9.1f %6lld %5.2f | %6s %9.1f %6lld %5.2f %5lld | %5.2fx\n", nodes, n, "",
                  st.steps_per_min, static_cast<long long>(st.recomputed_tokens), st.mean_imbalance, "",
                  gl.steps_per_min, static_cast<long long>(gl.recomputed_tokens), gl.mean_imbalance,
                  static_cast<long long>(gl.migrations),
                  st.steps_per_min > 0 ? gl.steps_per_min / st.steps_per_min : 0.0);
      std::fflush(stdout);
    }
  if (!args.json.empty()) std::ofstream(args.json) << out.dump(1) << "\n";
  return 0;
}

}  // namespace

int run_simulate(const SimulateArgs& args) {
  if (!args.nodes.empty()) return run_cluster_simulate(args);
  nlohmann::json out = nlohmann::json::array();
  std::printf("%11s", "concurrency");
  const SimPolicy policies[] = {SimPolicy::lru, SimPolicy::ttl, SimPolicy::program};
  for (SimPolicy p : policies) std::printf(" | %-8s steps/min recomp  p99 s", sim_policy_name(p));
  std::printf("\n");
  for (int n : args.concurrency) {
    std::printf("%11d", n);
    for (SimPolicy p : policies) {
      const SimOptions o = sim_options(args, p, n);
      const SimResult r = simulate(o);
      // recomp: tokens prefilled again / context tokens at the start of reason phases (can pass 100 %)
      std::printf(" | %8s %9.1f %5.0f%% %6.1f", "", r.steps_per_min, 100 * (1 - r.hit_rate), r.p99_reason_s);
      out.push_back({{"policy", sim_policy_name(p)},
                     {"concurrency", n},
                     {"steps_per_min", r.steps_per_min},
                     {"hit_rate", r.hit_rate},
                     {"recomputed_tokens", r.recomputed_tokens},
                     {"evictions", r.evictions},
                     {"offloads", r.offloads},
                     {"p50_reason_s", r.p50_reason_s},
                     {"p99_reason_s", r.p99_reason_s},
                     {"busy_s", r.busy_s}});
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!args.json.empty()) std::ofstream(args.json) << out.dump(1) << "\n";
  return 0;
}

}  // namespace chorus::app
