// A discrete-event simulator of agent programs sharing one engine's KV pages, driven by the same
// ProgramPolicy class as the live system (clock injected), and by the request-level baselines.
// It sweeps concurrency in seconds where the real benchmark takes minutes; its numbers are a
// model's (a step's time = fixed + per token + per attended pair), so they show shapes — where
// a policy collapses — not this machine's speed.
//
// The workload (closed loop): `concurrency` programs alive at all times; each runs `steps`
// steps of reason (prefill what is new, then decode `reason_tokens`) and act (a tool that takes
// a heavy-tailed time and returns `tool_tokens` tokens); a program that finishes is replaced by
// a new one.
#pragma once

#include <cstdint>
#include <string>

#include "engine/sched/program_policy.h"

namespace chorus {

enum class SimPolicy { program, lru, ttl };
const char* sim_policy_name(SimPolicy p);

struct SimOptions {
  SimPolicy policy = SimPolicy::program;
  int concurrency = 32;
  int steps = 8;  // reason/act steps per program
  int prompt_tokens = 512;
  int reason_tokens = 64;
  int tool_tokens = 200;
  double tool_scale_s = 1.0;  // act time: min(tool_cap_s, tool_scale_s * Pareto(alpha))
  double tool_alpha = 1.5;
  double tool_cap_s = 60;
  int64_t capacity_pages = 2048;  // KV pages of 16 tokens
  int token_budget = 512;         // tokens per engine step
  // Step time model: fixed + per token + per (query, key) pair attended.
  double step_fixed_s = 0.010;
  double step_per_token_s = 0.0002;
  double step_per_pair_s = 2e-9;
  double ttl_s = 2.0;  // SimPolicy::ttl
  // Host memory for the program policy's offloaded pauses (program.host_capacity_pages, 0: every
  // pause drops) and the engine time to copy one page out or back in.
  double offload_page_s = 0.0001;
  double duration_s = 600;  // simulated time
  uint64_t seed = 1;
  ProgramPolicyOptions program;  // the program policy's options (capacity_pages is taken from above)
};

struct SimResult {
  int64_t steps_done = 0;  // reason+act steps completed
  double steps_per_min = 0;
  int64_t recomputed_tokens = 0;  // prefilled again after an eviction
  int64_t context_tokens = 0;     // context a program had when each reason phase began
  double hit_rate = 0;            // 1 - recomputed / context
  int64_t engine_steps = 0;
  double busy_s = 0;                          // simulated time the engine computed
  int64_t evictions = 0;                      // pauses that dropped a program's KV
  int64_t offloads = 0;                       // pauses that copied it to host memory
  double p50_reason_s = 0, p99_reason_s = 0;  // a reason phase, from its start (tool done) to its last token
};

SimResult simulate(const SimOptions& opts);

}  // namespace chorus
