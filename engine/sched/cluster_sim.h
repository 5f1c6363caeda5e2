// The program simulator (engine/sched/program_sim.h) over several nodes: ThunderAgent's
// cross-node imbalance (§3.2, §4.3.2). Each node is an engine of its own with its own KV pages and
// its own clock, running the program policy (ProgramPolicy, as a live node does) over its programs;
// what differs is where a paused program may come back:
//
//  - sticky: on the node it was first placed on, always (as a KV-aware router that sends a
//    program back to where its cache was: vLLM's, SGLang's);
//  - global: one waiting queue for the cluster; a paused program is restored by whichever node's
//    policy finds room for it first, its context prefilled again there when that is not the node
//    its cache was on (a migration by recompute). Resident programs stay where their KV is.
//
// New programs go to the node with the most free pages under both. The workload is the
// single-node simulator's, made heterogeneous so that nodes drift apart: each program runs
// between 1 and 2 * steps - 1 steps, and its tool outputs are tool_tokens * 2^u tokens, u uniform
// in [-tool_tokens_spread, tool_tokens_spread], so some contexts grow far faster than others.
// A model, not a measurement (see program_sim.h).
#pragma once

#include <cstdint>

#include "engine/sched/program_sim.h"

namespace chorus {

enum class SimRouting { sticky, global };
const char* sim_routing_name(SimRouting r);

struct ClusterSimOptions {
  // The workload and each node's engine: concurrency is programs per node (the cluster keeps
  // nodes * concurrency alive), capacity_pages each node's pages; policy is not read (every node
  // runs the program policy).
  SimOptions node;
  int nodes = 2;
  SimRouting routing = SimRouting::global;
  double tool_tokens_spread = 2.0;  // log2 of the widest factor on a program's tool outputs
  // A program ends early when its next step would take its context past this (a model's context
  // length); 0: a quarter of a node's pages.
  int64_t max_context_tokens = 0;
};

struct ClusterSimResult {
  int64_t steps_done = 0;  // reason+act steps completed, all nodes
  double steps_per_min = 0;
  int64_t recomputed_tokens = 0;  // prefilled again: after a drop, or on a node the cache was not on
  int64_t migrations = 0;         // restores on another node than the one the program was last on
  int64_t evictions = 0;
  double peak_imbalance = 0;  // largest (most used node - least used node) / capacity, after a step
  double mean_imbalance = 0;  // ... averaged over the steps
  double p99_reason_s = 0;
};

ClusterSimResult simulate_cluster(const ClusterSimOptions& opts);

}  // namespace chorus
