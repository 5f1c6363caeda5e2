// `chorus simulate`: the discrete-event simulator of engine/sched/program_sim.h — programs sharing KV
// pages under the program-aware policy and the request-level baselines — over a sweep of
// concurrency. A model, not a measurement: it shows where a policy collapses, in seconds.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/chorus/commands.h"
#include "engine/sched/program_sim.h"

namespace chorus::app {

int run_simulate(const SimulateArgs& args) {
  nlohmann::json out = nlohmann::json::array();
  std::printf("%11s", "concurrency");
  const SimPolicy policies[] = {SimPolicy::lru, SimPolicy::ttl, SimPolicy::program};
  for (SimPolicy p : policies) std::printf(" | %-8s steps/min recomp  p99 s", sim_policy_name(p));
  std::printf("\n");
  for (int n : args.concurrency) {
    std::printf("%11d", n);
    for (SimPolicy p : policies) {
      SimOptions o;
      o.policy = p;
      o.concurrency = n;
      o.steps = args.steps;
      o.capacity_pages = args.pages;
      o.duration_s = args.duration_s;
      o.tool_scale_s = args.tool_scale_s;
      o.seed = args.seed;
      o.program.host_capacity_pages = args.host_pages;
      o.program.offload_displaces = args.displace;
      o.program.aging_s = args.aging_s;
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
